// The sharded engine against a plain single-process LibTorch run of the same model on
// the same data (the independent reference), under mpirun -np 1..4: every rank trains
// on its own rows; the loss per rank and the gathered gradients must match the
// reference's, whose loss is the mean of the per-rank losses.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include "catch_with_torch.h"

#include "areal/fsdp/engine.h"
#include "areal/fsdp/staged_init.h"
#include "areal/model/hf_weights.h"
#include "areal/optim/adamw.h"
#include <torch/torch.h>
#include "mpi_fixture.h"

using namespace areal;
using areal::testing::g_comm;
using areal::testing::g_me;

namespace {

const std::string kFixtures = AREAL_SOURCE_DIR "/tests/fixtures/models";

at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& ids) {
  const int64_t vocab = logits.size(-1), length = ids.size(1);
  return at::cross_entropy_loss(logits.narrow(1, 0, length - 1).reshape({-1, vocab}).to(at::kFloat),
                                ids.narrow(1, 1, length - 1).reshape({-1}));
}

}  // namespace

TEST_CASE("engine: loss and gradients equal a single-process run", "[mpi][engine]") {
  for (const auto& name : {"qwen2_tied", "llama", "qwen3"}) {
    INFO(name);
    const std::string path = kFixtures + "/" + name;
    Config cfg;
    cfg.model_path = path;
    cfg.fsdp.memory_efficient_load = true;
    cfg.device = "cpu";
    InitResult init = staged_init(cfg, g_me, *g_comm);
    FsdpEngine engine(*init.model, *g_comm, at::kFloat, at::kFloat);

    const int64_t rows_per_rank = 2, length = 9;
    const int64_t vocab = init.model->config().vocab_size;
    at::Tensor all_ids = at::randint(vocab, {rows_per_rank * g_me.world_size, length},
                                     at::make_generator<at::CPUGeneratorImpl>(42), at::kLong);
    at::Tensor my_ids = all_ids.narrow(0, g_me.rank * rows_per_rank, rows_per_rank);

    at::Tensor loss = next_token_loss(engine.forward(my_ids), my_ids);
    loss.backward();

    // The reference: the whole model in one process, the mean of every rank's loss.
    auto reference = load_causal_lm(path, at::kFloat);
    for (auto& p : reference->parameters()) p.requires_grad_(true);
    std::vector<at::Tensor> losses;
    for (int r = 0; r < g_me.world_size; ++r) {
      at::Tensor ids = all_ids.narrow(0, r * rows_per_rank, rows_per_rank);
      losses.push_back(next_token_loss(reference->forward(ids), ids));
    }
    at::stack(losses).mean().backward();
    CHECK(std::abs(loss.item<double>() - losses[g_me.rank].item<double>()) < 1e-5);

    std::map<std::string, at::Tensor> reference_grads;
    for (const auto& item : reference->named_parameters()) reference_grads[item.key()] = item.value().grad();
    for (size_t u = 0; u < init.model->units().size(); ++u) {
      const UnitLayout& unit = init.model->units()[u];
      REQUIRE(init.model->shard(u).grad().defined());
      at::Tensor full = at::empty({unit.padded_numel}, at::kFloat);
      g_comm->all_gather(init.model->shard(u).grad().contiguous(), full);
      for (const auto& [param, grad] : init.model->unit_views(u, full)) {
        INFO(param);
        CHECK(at::allclose(grad, reference_grads.at(param), 1e-4, 1e-6));
      }
      // Padding gets no gradient.
      CHECK(full.narrow(0, unit.numel, unit.padded_numel - unit.numel).abs().sum().item<double>() == 0);
    }
  }
}

TEST_CASE("engine: gradients accumulate over micro-batches", "[mpi][engine]") {
  Config cfg;
  cfg.model_path = kFixtures + "/qwen2_untied";
  cfg.device = "cpu";
  InitResult init = staged_init(cfg, g_me, *g_comm);
  FsdpEngine engine(*init.model, *g_comm, at::kFloat, at::kFloat);
  at::Tensor ids = at::randint(init.model->config().vocab_size, {4, 7},
                               at::make_generator<at::CPUGeneratorImpl>(g_me.rank + 1), at::kLong);
  // One batch of 4 rows at once...
  (next_token_loss(engine.forward(ids), ids)).backward();
  std::vector<at::Tensor> whole;
  for (size_t u = 0; u < init.model->units().size(); ++u) {
    whole.push_back(init.model->shard(u).grad().clone());
    init.model->shard(u).mutable_grad().zero_();
  }
  // ... equals two micro-batches of 2 rows, each loss weighted by half.
  for (int64_t m = 0; m < 2; ++m) {
    at::Tensor part = ids.narrow(0, 2 * m, 2);
    (next_token_loss(engine.forward(part), part) * 0.5).backward();
  }
  for (size_t u = 0; u < init.model->units().size(); ++u)
    CHECK(at::allclose(init.model->shard(u).grad(), whole[u], 1e-4, 1e-7));
}

TEST_CASE("engine: weights after 5 AdamW steps (clipped, decayed) equal a single-process run", "[mpi][engine][optim]") {
  const std::string path = kFixtures + "/qwen2_tied";
  Config cfg;
  cfg.model_path = path;
  cfg.fsdp.memory_efficient_load = true;
  cfg.device = "cpu";
  cfg.optimizer.lr = 1e-3;
  cfg.optimizer.weight_decay = 0.05;
  cfg.optimizer.gradient_clipping = 0.01;  // below the steps' norms: clipping is exercised
  InitResult init = staged_init(cfg, g_me, *g_comm);
  FsdpEngine engine(*init.model, *g_comm, at::kFloat, at::kFloat);
  std::vector<at::Tensor> shards;
  for (size_t u = 0; u < init.model->units().size(); ++u) shards.push_back(init.model->shard(u));
  ShardedAdamW optimizer(shards, cfg.optimizer, *g_comm);

  auto reference = load_causal_lm(path, at::kFloat);
  for (auto& p : reference->parameters()) p.requires_grad_(true);
  torch::optim::AdamW reference_optimizer(
      reference->parameters(),
      torch::optim::AdamWOptions(cfg.optimizer.lr).betas({cfg.optimizer.beta1, cfg.optimizer.beta2})
          .eps(cfg.optimizer.eps).weight_decay(cfg.optimizer.weight_decay));

  const int64_t rows = 2, vocab = init.model->config().vocab_size;
  bool clipped = false;
  for (int step = 0; step < 5; ++step) {
    at::Tensor all_ids = at::randint(vocab, {rows * g_me.world_size, 8},
                                     at::make_generator<at::CPUGeneratorImpl>(100 + step), at::kLong);
    at::Tensor mine = all_ids.narrow(0, g_me.rank * rows, rows);
    optimizer.zero_grad();
    next_token_loss(engine.forward(mine), mine).backward();
    StepResult result = optimizer.step(cfg.optimizer.lr);
    CHECK_FALSE(result.skipped);

    reference_optimizer.zero_grad();
    std::vector<at::Tensor> losses;
    for (int r = 0; r < g_me.world_size; ++r) {
      at::Tensor ids = all_ids.narrow(0, r * rows, rows);
      losses.push_back(next_token_loss(reference->forward(ids), ids));
    }
    at::stack(losses).mean().backward();
    double reference_norm = torch::nn::utils::clip_grad_norm_(reference->parameters(), cfg.optimizer.gradient_clipping);
    CHECK(std::abs(result.grad_norm - reference_norm) < 1e-4 * reference_norm);
    clipped = clipped || reference_norm > cfg.optimizer.gradient_clipping;
    reference_optimizer.step();
  }
  CHECK(clipped);
  std::map<std::string, at::Tensor> reference_params;
  for (const auto& item : reference->named_parameters()) reference_params[item.key()] = item.value();
  for (size_t u = 0; u < init.model->units().size(); ++u) {
    at::Tensor full = init.model->gather_unit(u, *g_comm, at::kFloat);
    for (const auto& [param, value] : init.model->unit_views(u, full)) {
      INFO(param);
      CHECK(at::allclose(value, reference_params.at(param), 1e-4, 1e-5));
    }
  }
}

TEST_CASE("optimizer: a non-finite gradient norm skips the step on every rank", "[mpi][optim]") {
  at::Tensor shard = at::ones({4}, at::kFloat).requires_grad_(true);
  shard.mutable_grad() = at::full({4}, g_me.rank == 0 ? std::nan("") : 1.0);
  OptimizerConfig config;
  ShardedAdamW optimizer({shard}, config, *g_comm);
  StepResult result = optimizer.step(0.1);
  CHECK(result.skipped);
  CHECK(at::equal(shard.detach(), at::ones({4})));
  CHECK(optimizer.steps_taken() == 0);
}
