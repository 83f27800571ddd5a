// Safetensors files and Hugging Face checkpoint directories: round trips, streaming,
// and every kind of damaged input, each with a message naming the file and tensor.
#include <ATen/ATen.h>
#include "catch_with_torch.h"
#include "run_python.h"
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "areal/io/checkpoint.h"
#include "areal/io/safetensors.h"

namespace fs = std::filesystem;
using namespace areal::io;
using Catch::Matchers::Contains;

namespace {

// A fresh directory per test case, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() / ("areal_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

// A file with a hand-written header: 8-byte length, JSON, then `data`.
void write_raw(const std::string& path, const std::string& json, const std::string& data, int64_t claimed_length = -1) {
  std::ofstream out(path, std::ios::binary);
  uint64_t length = claimed_length < 0 ? json.size() : static_cast<uint64_t>(claimed_length);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((length >> (8 * i)) & 0xff));
  out << json << data;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const CheckpointError& e) {
    return e.what();
  }
  return "";
}

std::vector<std::pair<std::string, at::Tensor>> sample_tensors() {
  return {
      {"model.embed_tokens.weight", at::randn({7, 3})},
      {"model.norm.weight", at::randn({3}).to(at::kBFloat16)},
      {"halves", at::randn({2, 2, 2}).to(at::kHalf)},
      {"ids", at::arange(5, at::kLong)},
      {"mask", at::tensor({1, 0, 1}, at::kByte).to(at::kBool)},
      {"scalar", at::tensor(3.5, at::kDouble)},
      {"empty", at::zeros({0, 4})},
  };
}

}  // namespace

TEST_CASE("safetensors: write then read gives the same tensors, dtypes and shapes", "[io]") {
  TempDir dir;
  auto tensors = sample_tensors();
  write_safetensors(dir / "a.safetensors", tensors, {{"format", "pt"}});
  SafetensorsReader reader(dir / "a.safetensors");
  CHECK(reader.tensors().size() == tensors.size());
  CHECK(reader.metadata().at("format") == "pt");
  for (const auto& [name, t] : tensors) {
    INFO(name);
    at::Tensor back = reader.read(name);
    CHECK(back.scalar_type() == t.scalar_type());
    CHECK(back.sizes() == t.sizes());
    CHECK(at::equal(back, t));
  }
  // The data starts 8-byte aligned, as the reference writer does.
  std::ifstream file(dir / "a.safetensors", std::ios::binary);
  uint64_t length = 0;
  file.read(reinterpret_cast<char*>(&length), 8);
  CHECK(length % 8 == 0);
  CHECK_FALSE(fs::exists(dir / "a.safetensors.tmp-" + std::to_string(::getpid())));
}

TEST_CASE("safetensors: read_into converts to the target dtype", "[io]") {
  TempDir dir;
  at::Tensor stored = at::randn({4, 5}).to(at::kBFloat16);
  write_safetensors(dir / "b.safetensors", {{"w", stored}});
  SafetensorsReader reader(dir / "b.safetensors");
  at::Tensor out = at::empty({20}, at::kFloat);
  reader.read_into("w", out);
  CHECK(at::equal(out.view({4, 5}), stored.to(at::kFloat)));
  at::Tensor wrong = at::empty({19}, at::kFloat);
  CHECK_THAT(error_of([&] { reader.read_into("w", wrong); }), Contains("'w'") && Contains("19 elements"));
  CHECK_THAT(error_of([&] { reader.read("nope"); }), Contains("no tensor 'nope'"));
}

TEST_CASE("safetensors: damaged files are refused with the file and tensor named", "[io][errors]") {
  TempDir dir;
  const std::string f = dir / "bad.safetensors";
  const std::string good = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  const std::string data(8, '\0');

  SECTION("empty and truncated files") {
    write_raw(f, "", "", 0);
    fs::resize_file(f, 3);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains(f) && Contains("truncated"));
    write_raw(f, good, data);
    fs::resize_file(f, fs::file_size(f) - 4);  // data cut short
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("'w'") && Contains("past the end of the data"));
  }
  SECTION("header length larger than the file") {
    write_raw(f, good, data, 1 << 20);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("header length 1048576 is larger than the file"));
  }
  SECTION("invalid JSON") {
    write_raw(f, R"({"w": {"dtype": "F32",)", data);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains(f) && Contains("not valid JSON"));
    write_raw(f, "[1, 2]", data);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("not a JSON object"));
  }
  SECTION("unknown dtype") {
    write_raw(f, R"({"w":{"dtype":"F8_E9M9","shape":[2],"data_offsets":[0,8]}})", data);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("'w'") && Contains("unknown dtype 'F8_E9M9'"));
  }
  SECTION("span outside the file") {
    write_raw(f, R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", data);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("'w'") && Contains("past the end"));
    write_raw(f, R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})", data);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("run backwards"));
  }
  SECTION("overlapping spans") {
    write_raw(f,
              R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"e":{"dtype":"F32","shape":[0],"data_offsets":[2,2]},)"
              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              data);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("'a' and 'b' overlap"));
  }
  SECTION("shape and byte span disagree") {
    write_raw(f, R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data + "0000");
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }),
               Contains("'w'") && Contains("needs 12 bytes but data_offsets span 8"));
  }
  SECTION("malformed entries") {
    write_raw(f, R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("not a non-negative integer"));
    write_raw(f, R"({"w":{"dtype":"F32","shape":[2]}})", data);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("data_offsets must be"));
    write_raw(f, R"({"w":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,8]}})", data);
    CHECK_THAT(error_of([&] { SafetensorsReader r(f); }), Contains("too large"));
  }
  SECTION("a missing file") {
    CHECK_THAT(error_of([&] { SafetensorsReader r(dir / "none.safetensors"); }),
               Contains("none.safetensors") && Contains("cannot open"));
  }
}

TEST_CASE("checkpoint: one file, or shards with an index, read back alike", "[io][checkpoint]") {
  TempDir dir;
  auto tensors = sample_tensors();
  std::vector<TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, from_scalar_type(t.scalar_type()), t.sizes().vec()});
  auto tensor_for = [&](const TensorSpec& spec) {
    for (const auto& [name, t] : tensors)
      if (name == spec.name) return t;
    FAIL("asked for an unknown tensor");
    return at::Tensor();
  };
  const std::string config = R"({"model_type": "qwen2"})";

  for (uint64_t max_shard : {uint64_t{1} << 30, uint64_t{40}}) {
    INFO("max shard bytes " << max_shard);
    const std::string ckpt = dir / ("ckpt" + std::to_string(max_shard));
    write_checkpoint(ckpt, config, specs, tensor_for, max_shard);
    const bool sharded = max_shard == 40;
    CHECK(fs::exists(fs::path(ckpt) / "model.safetensors") == !sharded);
    CHECK(fs::exists(fs::path(ckpt) / "model.safetensors.index.json") == sharded);
    if (sharded) CHECK(fs::exists(fs::path(ckpt) / "model-00001-of-00004.safetensors"));
    CheckpointReader reader(ckpt);
    CHECK(reader.names().size() == tensors.size());
    uint64_t total = 0;
    for (const auto& [name, t] : tensors) {
      INFO(name);
      CHECK(at::equal(reader.read(name), t));
      total += t.numel() * t.element_size();
    }
    CHECK(reader.total_bytes() == total);
    CHECK(fs::path(reader.config_path()).filename() == "config.json");
  }
  // A single .safetensors path works too.
  CheckpointReader single(dir / "ckpt1073741824/model.safetensors");
  CHECK(single.contains("ids"));
}

TEST_CASE("checkpoint: a failed save leaves the older checkpoint untouched and no debris", "[io][checkpoint]") {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  at::Tensor w = at::ones({4});
  write_checkpoint(ckpt, "{}", {{"w", DType::F32, {4}}}, [&](const TensorSpec&) { return w; });
  CHECK_THROWS(write_checkpoint(ckpt, "{}", {{"w", DType::F32, {4}}, {"v", DType::F32, {2}}},
                                [&](const TensorSpec& spec) -> at::Tensor {
                                  if (spec.name == "v") throw std::runtime_error("out of memory while gathering");
                                  return w * 2;
                                }));
  CHECK(at::equal(CheckpointReader(ckpt).read("w"), w));
  CHECK(std::distance(fs::directory_iterator(dir.path), fs::directory_iterator()) == 1);
}

TEST_CASE("checkpoint: damaged directories are refused by name", "[io][checkpoint][errors]") {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  std::vector<TensorSpec> specs = {{"a", DType::F32, {4}}, {"b", DType::F32, {4}}};
  write_checkpoint(ckpt, "{}", specs, [](const TensorSpec&) { return at::zeros({4}); }, 16);

  SECTION("missing shard named by the index") {
    fs::remove(fs::path(ckpt) / "model-00002-of-00002.safetensors");
    CHECK_THAT(error_of([&] { CheckpointReader r(ckpt); }),
               Contains("model-00002-of-00002.safetensors") && Contains("missing") && Contains("'b'"));
  }
  SECTION("missing config.json") {
    fs::remove(fs::path(ckpt) / "config.json");
    CHECK_THAT(error_of([&] { CheckpointReader r(ckpt); }), Contains(ckpt) && Contains("no config.json"));
  }
  SECTION("index naming a tensor its shard lacks") {
    std::ofstream(fs::path(ckpt) / "model.safetensors.index.json")
        << R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors"}})";
    CHECK_THAT(error_of([&] { CheckpointReader r(ckpt); }), Contains("tensor 'b'") && Contains("not in it"));
  }
  SECTION("a shard tensor the index does not list") {
    std::ofstream(fs::path(ckpt) / "model.safetensors.index.json")
        << R"({"weight_map": {"a": "model-00001-of-00002.safetensors"}})";
    CheckpointReader r(ckpt);  // b's shard is never opened: nothing refers to it
    CHECK_FALSE(r.contains("b"));
    std::ofstream(fs::path(ckpt) / "model.safetensors.index.json") << R"({"weight_map": 3})";
    CHECK_THAT(error_of([&] { CheckpointReader r2(ckpt); }), Contains("not a valid index"));
  }
  SECTION("no weights at all") {
    fs::remove(fs::path(ckpt) / "model.safetensors.index.json");
    CHECK_THAT(error_of([&] { CheckpointReader r(ckpt); }), Contains("neither model.safetensors nor"));
  }
  SECTION("no such path") {
    CHECK_THAT(error_of([&] { CheckpointReader r(dir / "nothing"); }), Contains("no such file or directory"));
  }
}

TEST_CASE("safetensors: files interoperate with the reference Python implementation", "[io][python]") {
  // The same pattern as tests/python/safetensors_interop.py, computed independently.
  auto pattern = [](at::ScalarType t) {
    at::Tensor v = at::arange(3 * 5 * 7, at::kLong).mul(37).remainder(101).sub(50);
    if (at::isFloatingType(t)) return v.to(at::kDouble).mul(0.125).to(t).view({3, 5, 7});
    if (t == at::kByte) v = v.add(50);
    return v.to(t).view({3, 5, 7});
  };
  const std::vector<std::pair<std::string, at::ScalarType>> dtypes = {
      {"f32", at::kFloat}, {"f64", at::kDouble}, {"bf16", at::kBFloat16}, {"f16", at::kHalf}, {"i64", at::kLong},
      {"i32", at::kInt},   {"i16", at::kShort},  {"i8", at::kChar},       {"u8", at::kByte}};
  TempDir dir;
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& [name, t] : dtypes) tensors.emplace_back(name, pattern(t));
  write_safetensors(dir / "cpp.safetensors", tensors);

  PythonResult python = run_python("safetensors_interop.py " + dir.path.string());
  INFO(python.output);
  REQUIRE(python.exit_code == 0);

  SafetensorsReader reader(dir / "py.safetensors");
  for (const auto& [name, t] : dtypes) {
    INFO(name);
    CHECK(at::equal(reader.read(name), pattern(t)));
  }
}
