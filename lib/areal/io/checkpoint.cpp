#include "areal/io/checkpoint.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "areal/io/atomic_dir.h"
#include "areal/io/hf_model_dir.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace fs = std::filesystem;

namespace areal::io {
namespace {

constexpr const char* kSingleFile = HfModelDir::kSingleWeightsFile;
constexpr const char* kIndexFile = HfModelDir::kWeightsIndexFile;

std::string read_text(const fs::path& path) {
  std::ifstream file(path);
  if (!file) throw CheckpointError(cat(path.string(), ": cannot read"));
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

void write_text_atomically(const fs::path& path, const std::string& text) {
  fs::path temp = path.string() + cat(".tmp-", ::getpid());
  {
    std::ofstream out(temp);
    out << text;
    if (!out.flush()) throw CheckpointError(cat(temp.string(), ": write failed"));
  }
  fs::rename(temp, path);
}

// Writes config.json, the planned shards and (for several shards) the index into temp_dir.
void write_files(const fs::path& temp_dir, const std::string& config_json, const std::vector<TensorSpec>& specs,
                 const std::vector<std::vector<size_t>>& shards, uint64_t total,
                 const std::function<at::Tensor(const TensorSpec&)>& tensor_for) {
  write_text_atomically(temp_dir / HfModelDir::kConfigFile, config_json);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t s = 0; s < shards.size(); ++s) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards.size());
    const std::string file = shards.size() == 1 ? kSingleFile : name;
    std::vector<TensorSpec> shard_specs;
    for (size_t i : shards[s]) shard_specs.push_back(specs[i]);
    SafetensorsWriter writer((temp_dir / file).string(), shard_specs, {{"format", "pt"}});
    for (const auto& spec : shard_specs) {
      writer.write(spec.name, tensor_for(spec));
      weight_map[spec.name] = file;
    }
    writer.finish();
  }
  if (shards.size() > 1) {
    nlohmann::ordered_json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text_atomically(temp_dir / kIndexFile, index.dump(2) + "\n");
  }

}

}  // namespace

CheckpointReader::CheckpointReader(const std::string& path) : path_(path) {
  if (!fs::exists(path)) throw CheckpointError(cat(path, ": no such file or directory"));

  auto add_file = [&](const fs::path& file) -> size_t {
    files_.push_back(std::make_unique<SafetensorsReader>(file.string()));
    return files_.size() - 1;
  };

  const HfModelDir model(path);
  config_path_ = model.config_json();
  if (model.names_a_file()) {  // a single .safetensors file; config.json beside it
    size_t i = add_file(path);
    for (const auto& t : files_[i]->tensors()) where_[t.name] = i;
    return;
  }

  if (!fs::exists(config_path_)) throw CheckpointError(cat(path, ": no config.json in the checkpoint directory"));

  const fs::path index_path = fs::path(path) / kIndexFile;
  if (!fs::exists(index_path)) {
    if (!fs::exists(fs::path(path) / kSingleFile))
      throw CheckpointError(cat(path, ": neither ", kSingleFile, " nor ", kIndexFile, " in the checkpoint directory"));
    size_t i = add_file(fs::path(path) / kSingleFile);
    for (const auto& t : files_[i]->tensors()) where_[t.name] = i;
    return;
  }

  // Sharded: the index's weight_map names the shard of every tensor.
  nlohmann::json index = nlohmann::json::parse(read_text(index_path), nullptr, false);
  if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw CheckpointError(cat(index_path.string(), ": not a valid index (needs a \"weight_map\" object)"));
  std::map<std::string, size_t> shard_of_file;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    if (!shard.is_string())
      throw CheckpointError(cat(index_path.string(), ": weight_map entry '", name, "' is not a file name"));
    const std::string file = shard.get<std::string>();
    if (!shard_of_file.count(file)) {
      const fs::path shard_path = fs::path(path) / file;
      if (!fs::exists(shard_path))
        throw CheckpointError(cat(index_path.string(), ": shard '", file, "' (holding '", name, "') is missing"));
      shard_of_file[file] = add_file(shard_path);
    }
    const size_t i = shard_of_file[file];
    if (!files_[i]->find(name))
      throw CheckpointError(cat(files_[i]->path(), ": the index places tensor '", name, "' here, but it is not in it"));
    where_[name] = i;
  }
  for (const auto& file : files_)
    for (const auto& t : file->tensors()) {
      auto it = where_.find(t.name);
      if (it == where_.end())
        throw CheckpointError(cat(file->path(), ": tensor '", t.name, "' is not listed in ", kIndexFile));
      if (files_[it->second].get() != file.get())
        throw CheckpointError(cat(file->path(), ": tensor '", t.name, "' appears in more than one shard"));
    }
}

std::vector<std::string> CheckpointReader::names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

const SafetensorsReader& CheckpointReader::reader_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) throw CheckpointError(cat(path_, ": no tensor '", name, "' in the checkpoint"));
  return *files_[it->second];
}

const TensorEntry& CheckpointReader::entry(const std::string& name) const { return *reader_of(name).find(name); }
const std::string& CheckpointReader::file_of(const std::string& name) const { return reader_of(name).path(); }

uint64_t CheckpointReader::total_bytes() const {
  uint64_t total = 0;
  for (const auto& file : files_)
    for (const auto& t : file->tensors()) total += t.end - t.begin;
  return total;
}

at::Tensor CheckpointReader::read(const std::string& name) const { return reader_of(name).read(name); }
void CheckpointReader::read_into(const std::string& name, at::Tensor& out) const {
  reader_of(name).read_into(name, out);
}
void CheckpointReader::read_range_into(const std::string& name, int64_t first, at::Tensor& out) const {
  reader_of(name).read_range_into(name, first, out);
}

void write_checkpoint(const std::string& dir, const std::string& config_json, const std::vector<TensorSpec>& specs,
                      const std::function<at::Tensor(const TensorSpec&)>& tensor_for, uint64_t max_shard_bytes,
                      const std::function<void(const std::string&)>& extra_files) {
  // Plan the shards first: their count is part of every shard's name.
  std::vector<std::vector<size_t>> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    if (!shards.back().empty() && in_shard + specs[i].bytes() > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(i);
    in_shard += specs[i].bytes();
    total += specs[i].bytes();
  }

  const fs::path final_dir = normalized_dir(dir);
  const fs::path temp_dir = begin_dir_write(final_dir, ::getpid());
  try {
    write_files(temp_dir, config_json, specs, shards, total, tensor_for);
    if (extra_files) extra_files(temp_dir.string());
  } catch (...) {
    fs::remove_all(temp_dir);  // a failed save leaves nothing, and an older checkpoint untouched
    throw;
  }
  commit_dir_write(temp_dir, final_dir, "checkpoint");
}

}  // namespace areal::io
