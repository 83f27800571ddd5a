// One training step of the sharded engine (forward, backward, AdamW) on ROWS x LENGTH
// tokens in one process, beside its floor: the step's matrix products alone (each
// projection's forward, input-gradient and weight-gradient products and the head's, the
// same shapes, torch's threads, dtype), and where the step's time goes per operation
// (op_profile.h). The training phase of an RL step is this step on its answers.
// With GROUP > 1 the rows come in groups of GROUP that start with the same PROMPT tokens
// and run as one packed micro-batch sharing each prompt (actor.share_prompts, as the RL
// update packs a step's groups); the floor then counts the tokens the forward runs.
//
//   areal_train_step_bench MODEL_DIR OUT.json [ROWS] [LENGTH] [STEPS] [float32|bfloat16] [GROUP PROMPT]
#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "areal/dist/bootstrap.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/micro_batches.h"
#include "areal/fsdp/policy.h"
#include "areal/fsdp/staged_init.h"
#include "areal/optim/adamw.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"
#include "op_profile.h"

using namespace areal;

namespace {

using Clock = std::chrono::steady_clock;

// Seconds per run of `work`, the mean of `runs` after one warm-up.
double seconds_per_run(int64_t runs, const std::function<void()>& work) {
  work();
  const auto start = Clock::now();
  for (int64_t r = 0; r < runs; ++r) work();
  return std::chrono::duration<double>(Clock::now() - start).count() / runs;
}

// The step's products alone on random tensors of its shapes: for each projection
// [out, in] over `tokens` rows, y = x W^T, dx = dy W, dW = dy^T x.
std::function<void()> products_floor(const ModelConfig& c, int64_t tokens, at::ScalarType dtype) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  std::vector<std::pair<int64_t, int64_t>> shapes;  // [out, in]
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (auto shape : std::vector<std::pair<int64_t, int64_t>>{{q, h}, {kv, h}, {kv, h}, {h, q},
                                                               {c.intermediate_size, h}, {c.intermediate_size, h},
                                                               {h, c.intermediate_size}})
      shapes.push_back(shape);
  shapes.push_back({c.vocab_size, h});
  struct Product {
    at::Tensor x, w, dy;
  };
  auto products = std::make_shared<std::vector<Product>>();
  const auto options = at::TensorOptions().dtype(dtype);
  for (auto [out, in] : shapes)
    products->push_back({at::randn({tokens, in}, options), at::randn({out, in}, options), at::randn({tokens, out}, options)});
  return [products] {
    for (const Product& p : *products) {
      at::mm(p.x, p.w.t());
      at::mm(p.dy, p.w);
      at::mm(p.dy.t(), p.x);
    }
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || argc > 9 || argc == 8) {
    std::fprintf(stderr, "usage: %s MODEL_DIR OUT.json [ROWS] [LENGTH] [STEPS] [float32|bfloat16] [GROUP PROMPT]\n",
                 argv[0]);
    return 2;
  }
  const int64_t rows = argc > 3 ? std::stoll(argv[3]) : 32, length = argc > 4 ? std::stoll(argv[4]) : 96;
  const int64_t steps = argc > 5 ? std::stoll(argv[5]) : 3;
  const std::string dtype_name = argc > 6 ? argv[6] : "float32";
  const int64_t group = argc > 7 ? std::stoll(argv[7]) : 1, prompt = argc > 8 ? std::stoll(argv[8]) : 0;
  if (dtype_name != "float32" && dtype_name != "bfloat16") {
    std::fprintf(stderr, "dtype must be float32 or bfloat16, not %s\n", dtype_name.c_str());
    return 2;
  }
  if (group < 1 || rows % group != 0 || (group > 1 && (prompt < 1 || prompt >= length))) {
    std::fprintf(stderr, "GROUP must divide ROWS and PROMPT lie in [1, LENGTH)\n");
    return 2;
  }
  const at::ScalarType dtype = dtype_name == "bfloat16" ? at::kBFloat16 : at::kFloat;
  return run_guarded([&] {
    Config cfg;
    cfg.model_path = argv[1];
    cfg.device = "cpu";
    cfg.actor.dtype = dtype_name;
    cfg.actor.grad_reduce_dtype = "float32";
    RankInfo me = bootstrap(cfg);
    log::configure(me.rank, me.world_size, "warn", false);
    Communicator comm(me);
    InitResult init = staged_init(cfg, me, comm);
    const ModelConfig& c = init.model->config();
    if (c.num_experts > 0) throw std::invalid_argument("train_step_bench: a dense model (its floor counts dense layers)");
    Policy policy(cfg, *init.model, comm);
    ShardedAdamW optimizer(policy.trainable(), cfg.optimizer, comm);
    PaddedSequences set;
    set.ids = at::randint(c.vocab_size, {rows, length}, at::kLong);
    set.lengths.assign(static_cast<size_t>(rows), length);
    if (group > 1) {  // each group's rows start with its first row's prompt
      for (int64_t r = 0; r < rows; ++r)
        set.ids[r].narrow(0, 0, prompt).copy_(set.ids[r / group * group].narrow(0, 0, prompt));
      set.prompt_lengths.assign(static_cast<size_t>(rows), prompt);
    }
    const MicroBatch mb = micro_batches(set, 0, rows, group > 1 ? rows * length : 0, comm, at::Device("cpu")).at(0);
    // The head on the positions with a target only, as the RL and SFT losses run it.
    const at::Tensor targets_mask = mb.lay_out(at::ones({rows, length - 1})) > 0;
    const at::Tensor targets = mb.targets().masked_select(targets_mask);
    auto step = [&] {
      optimizer.zero_grad();
      const at::Tensor logits = mb.forward_at(policy, targets_mask);
      at::cross_entropy_loss(logits.to(at::kFloat), targets).backward();
      optimizer.step(1e-6);
    };
    bench::install_op_profile();
    step();  // warm-up
    bench::record_ops(true);
    const auto start = Clock::now();
    for (int64_t s = 0; s < steps; ++s) step();
    const double step_seconds = std::chrono::duration<double>(Clock::now() - start).count() / steps;
    bench::record_ops(false);
    const double floor_seconds = seconds_per_run(steps, products_floor(c, mb.tokens(), dtype));

    const std::string layout =
        group > 1 ? cat(" in groups of ", group, " sharing ", prompt, "-token prompts (", mb.tokens(), " tokens run)") : "";
    std::printf("%s, %lld x %lld tokens%s, %d threads: step %.1f ms, products alone %.1f ms (floor/step %.2f)\n",
                dtype_name.c_str(), static_cast<long long>(rows), static_cast<long long>(length), layout.c_str(),
                at::get_num_threads(), step_seconds * 1e3, floor_seconds * 1e3, floor_seconds / step_seconds);
    std::printf("%10s %7s  operation (top level; a nested one counts in its caller)\n", "ms/step", "share");
    nlohmann::json ops = nlohmann::json::object();
    double listed = 0;
    for (const auto& [seconds, name] : bench::ranked_ops()) {
      ops[name] = seconds / steps;
      if (ops.size() <= 16) {
        std::printf("%10.1f %6.1f%%  %s\n", seconds / steps * 1e3, 100 * seconds / steps / step_seconds, name.c_str());
        listed += seconds / steps;
      }
    }
    std::printf("%10.1f %6.1f%%  (not in the 16 above: other operations, and time outside any)\n",
                (step_seconds - listed) * 1e3, 100 * (step_seconds - listed) / step_seconds);
    nlohmann::json out = {{"dtype", dtype_name},
                          {"rows", rows},
                          {"length", length},
                          {"group", group},
                          {"prompt", prompt},
                          {"tokens_run", mb.tokens()},
                          {"threads", at::get_num_threads()},
                          {"cores", std::thread::hardware_concurrency()},
                          {"step_seconds", step_seconds},
                          {"floor_seconds", floor_seconds},
                          {"floor_share", floor_seconds / step_seconds},
                          {"op_seconds_per_step", ops}};
    std::ofstream(argv[2]) << out.dump(1) << "\n";
    return 0;
  });
}
