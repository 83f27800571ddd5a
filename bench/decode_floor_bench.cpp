// One decode step of generation against its floor: the same step's matrix products
// alone (the same weights and shapes, torch's threads, dtype), timed side by side in one
// process, at several batch rows and contexts. Also where the rest of a step goes: the
// time of each top-level operation (ATen ops, the paged attention kernel, sampling),
// from torch's RecordFunction hooks.
//
//   areal_decode_floor_bench MODEL_DIR OUT.json [ROWS,ROWS,...] [CONTEXTS,...] [STEPS] [DTYPE]
//
// A step is what generation runs for every new token: the embedding, each layer with
// its attention over the paged KV cache (rollout/paged_attention.h), the head on the
// rows' positions, and sampling (temperature 1, no top-k/top-p). The cache holds
// CONTEXT tokens of random keys and values per row before the timed steps. The floor
// runs each layer's projections (q, k, v, o, gate, up, down with their biases) and the
// head as at::linear on [ROWS, in] inputs, in the step's order. The packed floor runs the
// same products on the weights packed as generation holds them on the CPU
// (model/packed_weights.h): the floor of a step that packs them.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "areal/model/functional.h"
#include "areal/model/hf_weights.h"
#include "areal/model/packed_weights.h"
#include "areal/model/rotary.h"
#include "areal/rollout/generation.h"
#include "areal/rollout/paged_kv_cache.h"
#include "areal/rollout/sampling.h"
#include "op_profile.h"

using namespace areal;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// The step's projections in order, with their biases: what the floor runs.
struct Projection {
  at::Tensor weight, bias;
};
std::vector<Projection> step_projections(const RolloutModel& model) {
  const std::map<std::string, at::Tensor> slices = model.named_slices();
  auto get = [&](const std::string& name) {
    auto it = slices.find(name);
    return it == slices.end() ? at::Tensor() : it->second;
  };
  std::vector<Projection> out;
  for (int64_t l = 0; l < model.config().num_hidden_layers; ++l)
    for (const char* name : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                             "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      const std::string prefix = "model.layers." + std::to_string(l) + "." + name;
      out.push_back({get(prefix + ".weight"), get(prefix + ".bias")});
    }
  out.push_back({get(model.config().tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight"), {}});
  return out;
}

struct Figures {
  double step_seconds = 0, forward_seconds = 0, floor_seconds = 0, packed_floor_seconds = 0;
  std::map<std::string, double> ops;  // per step
};

Figures measure(RolloutModel& model, int64_t rows, int64_t context, int64_t steps) {
  const ModelConfig& c = model.config();
  const at::ScalarType dtype = c10::typeMetaToScalarType(model.options().dtype());
  PagedKvCache cache(model, rows, context + steps + 4);
  cache.add_rows(rows);
  std::vector<int64_t> row_ids(rows);
  for (int64_t r = 0; r < rows; ++r) row_ids[r] = r;
  {  // CONTEXT tokens of random keys and values in every row (one query each: cheap)
    const CacheStep fill = cache.begin(row_ids, std::vector<int64_t>(rows, context), context);
    const int64_t kv = model.local_kv_heads();
    for (size_t i = 0; i < static_cast<size_t>(c.num_hidden_layers); ++i) {
      at::Tensor q = at::randn({rows, c.num_attention_heads, 1, c.head_dim}, model.options());
      cache.attend(i, fill, q, at::randn({rows, kv, context, c.head_dim}, model.options()),
                   at::randn({rows, kv, context, c.head_dim}, model.options()));
    }
  }
  SamplingParams params;
  std::vector<at::Generator> generators;
  for (int64_t r = 0; r < rows; ++r) generators.push_back(answer_generator(0, 0, r, 0));
  const VocabSlice vocab{{}, model.vocab_begin(), c.vocab_size};
  at::Tensor tokens = at::randint(3, c.vocab_size, {rows, 1}, at::kLong);

  Figures f;
  auto decode = [&](bool timed) {
    const auto start = Clock::now();
    const CacheStep step = cache.begin(row_ids, std::vector<int64_t>(rows, 1), 1);
    AttentionInputs attention;
    set_rotary(attention, step.positions, c, dtype);
    at::Tensor h = model.embed(tokens);
    for (size_t i = 0; i < static_cast<size_t>(c.num_hidden_layers); ++i) {
      attention.cached = [&cache, &step, i](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
        return cache.attend(i, step, q, k, v);
      };
      h = model.layer(i, h, attention);
    }
    VocabSlice slice = vocab;
    slice.logits = model.local_logits(h).select(1, 0).to(at::kFloat);
    const double forward = seconds_since(start);
    const NextTokens next = sample_next(slice, params, generators, std::vector<bool>(rows, false), nullptr);
    tokens = at::tensor(next.tokens, at::kLong).unsqueeze(1);
    if (timed) {
      f.forward_seconds += forward;
      f.step_seconds += seconds_since(start);
    }
  };
  decode(false);  // warm-up
  bench::record_ops(true);
  for (int64_t s = 0; s < steps; ++s) decode(true);
  bench::record_ops(false);
  for (const auto& [name, seconds] : bench::op_seconds()) f.ops[name] = seconds / steps;

  const std::vector<Projection> projections = step_projections(model);
  std::map<int64_t, at::Tensor> inputs;  // by input width
  for (const Projection& p : projections)
    if (!inputs.count(p.weight.size(1))) inputs[p.weight.size(1)] = at::randn({rows, p.weight.size(1)}, model.options());
  auto floor = [&] {
    for (const Projection& p : projections) at::linear(inputs.at(p.weight.size(1)), p.weight, p.bias);
  };
  std::vector<Projection> packed = projections;
  for (Projection& p : packed)
    if (can_pack_weight(p.weight)) p.weight = pack_weight(p.weight);
  auto packed_floor = [&] {
    for (const Projection& p : packed) linear_product(inputs.at(p.weight.size(1)), p.weight, p.bias);
  };
  auto time = [&](auto&& products) {
    products();  // warm-up
    const auto start = Clock::now();
    for (int64_t s = 0; s < steps; ++s) products();
    return seconds_since(start) / steps;
  };
  f.floor_seconds = time(floor);
  f.packed_floor_seconds = time(packed_floor);
  f.step_seconds /= steps;
  f.forward_seconds /= steps;
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 7) {
    std::fprintf(stderr, "usage: %s MODEL_DIR OUT.json [ROWS,...] [CONTEXTS,...] [STEPS] [float32|bfloat16]\n", argv[0]);
    return 2;
  }
  const std::vector<int64_t> all_rows = numbers(argc > 3 ? argv[3] : "8,32,128");
  const std::vector<int64_t> contexts = numbers(argc > 4 ? argv[4] : "64,256,1024");
  const int64_t steps = argc > 5 ? std::stoll(argv[5]) : 8;
  at::NoGradGuard no_grad;
  const std::string dtype = argc > 6 ? argv[6] : "float32";
  if (dtype != "float32" && dtype != "bfloat16") {
    std::fprintf(stderr, "dtype must be float32 or bfloat16, not %s\n", dtype.c_str());
    return 2;
  }
  auto whole = load_causal_lm(argv[1], dtype == "bfloat16" ? at::kBFloat16 : at::kFloat);
  RolloutModel model(*whole);
  bench::install_op_profile();
  nlohmann::json rows_out = nlohmann::json::array();
  std::printf("%6s %8s %10s %10s %10s %8s %10s %8s  top operations (ms per step)\n", "rows", "context", "step ms",
              "forward ms", "floor ms", "floor/step", "packed ms", "packed/step");
  for (int64_t rows : all_rows)
    for (int64_t context : contexts) {
      const Figures f = measure(model, rows, context, steps);
      std::vector<std::pair<double, std::string>> ranked;
      for (const auto& [name, s] : f.ops) ranked.push_back({s, name});
      std::sort(ranked.rbegin(), ranked.rend());
      std::string top;
      nlohmann::json ops = nlohmann::json::object();
      for (size_t i = 0; i < ranked.size(); ++i) {
        ops[ranked[i].second] = ranked[i].first;
        if (i < 8) top += ranked[i].second + " " + std::to_string(ranked[i].first * 1e3).substr(0, 5) + "  ";
      }
      std::printf("%6lld %8lld %10.2f %10.2f %10.2f %8.2f %10.2f %8.2f  %s\n", static_cast<long long>(rows),
                  static_cast<long long>(context), f.step_seconds * 1e3, f.forward_seconds * 1e3,
                  f.floor_seconds * 1e3, f.floor_seconds / f.step_seconds, f.packed_floor_seconds * 1e3,
                  f.packed_floor_seconds / f.step_seconds, top.c_str());
      rows_out.push_back({{"rows", rows}, {"context", context}, {"step_seconds", f.step_seconds},
                          {"forward_seconds", f.forward_seconds}, {"floor_seconds", f.floor_seconds},
                          {"floor_share", f.floor_seconds / f.step_seconds},
                          {"packed_floor_seconds", f.packed_floor_seconds},
                          {"packed_floor_share", f.packed_floor_seconds / f.step_seconds},
                          {"tokens_per_second", rows / f.step_seconds}, {"ops_seconds_per_step", ops}});
    }
  std::ofstream(argv[2]) << nlohmann::json{{"model", argv[1]}, {"steps", steps}, {"rows", rows_out}}.dump(1) << "\n";
  return 0;
}
