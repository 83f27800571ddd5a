// The sharded engine against a plain single-process LibTorch run of the same model on
// the same data (the independent reference), under mpirun -np 1..4: every rank trains
// on its own rows; the loss per rank and the gathered gradients must match the
// reference's, whose loss is the mean of the per-rank losses.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include "catch_with_torch.h"

#include "areal/fsdp/engine.h"
#include "areal/fsdp/expert_parallel.h"
#include "areal/fsdp/micro_batches.h"
#include "areal/fsdp/policy.h"
#include "areal/fsdp/overlap.h"
#include "areal/fsdp/staged_init.h"
#include "areal/fsdp/tensor_parallel.h"
#include "areal/model/hf_weights.h"
#include "areal/optim/adamw.h"
#include <torch/torch.h>
#include "areal/util/strings.h"
#include "mpi_fixture.h"
#include "test_paths.h"

using namespace areal;
using areal::testing::g_comm;
using areal::testing::g_me;

namespace {

const std::string kFixtures = source_path("tests/fixtures/models");

at::Tensor next_token_loss(const at::Tensor& logits, const at::Tensor& ids) {
  const int64_t vocab = logits.size(-1), length = ids.size(1);
  return at::cross_entropy_loss(logits.narrow(1, 0, length - 1).reshape({-1, vocab}).to(at::kFloat),
                                ids.narrow(1, 1, length - 1).reshape({-1}));
}

// Every unit's shard gradients gathered from all ranks, by parameter name; checks on
// the way that the padding got no gradient.
std::map<std::string, at::Tensor> gathered_grads(ShardedModel& model) {
  std::map<std::string, at::Tensor> grads;
  for (size_t u = 0; u < model.units().size(); ++u) {
    const UnitLayout& unit = model.units()[u];
    REQUIRE(model.shard(u).grad().defined());
    at::Tensor full = at::empty({unit.padded_numel}, at::kFloat);
    g_comm->all_gather(model.shard(u).grad().contiguous(), full);
    CHECK(full.narrow(0, unit.numel, unit.padded_numel - unit.numel).abs().sum().item<double>() == 0);
    for (const auto& [param, grad] : model.unit_views(u, full)) grads[param] = grad.clone();
  }
  return grads;
}

std::map<std::string, at::Tensor> reference_grads(CausalLM& reference) {
  std::map<std::string, at::Tensor> grads;
  for (const auto& item : reference.named_parameters()) grads[item.key()] = item.value().grad().clone();
  return grads;
}

// The single-process reference's loss for the global batch `all` (rows_per_rank rows
// of each rank in turn): the mean over ranks of each rank's loss, which is what the
// engine's gradients, averaged over ranks, are the gradient of. Each rank's own loss
// goes to `per_rank` when given.
at::Tensor reference_loss(CausalLM& reference, const at::Tensor& all, int64_t rows_per_rank,
                          std::vector<at::Tensor>* per_rank = nullptr) {
  std::vector<at::Tensor> losses;
  for (int64_t r = 0; r * rows_per_rank < all.size(0); ++r) {
    at::Tensor ids = all.narrow(0, r * rows_per_rank, rows_per_rank);
    losses.push_back(next_token_loss(reference.forward(ids), ids));
  }
  if (per_rank) *per_rank = losses;
  return at::stack(losses).mean();
}

void check_grads_equal(const std::map<std::string, at::Tensor>& got, const std::map<std::string, at::Tensor>& want) {
  REQUIRE(got.size() == want.size());
  for (const auto& [param, grad] : got) {
    INFO(param);
    CHECK(at::allclose(grad, want.at(param), 1e-4, 1e-6));
  }
}

// A fixture by the staged init's sliced path, and a float32 engine over it.
struct LoadedEngine {
  InitResult init;
  std::unique_ptr<FsdpEngine> engine;
};
LoadedEngine load_engine(const std::string& path, bool checkpointing) {
  Config cfg;
  cfg.model_path = path;
  cfg.device = "cpu";
  LoadedEngine loaded{staged_init(cfg, g_me, *g_comm), nullptr};
  loaded.engine = std::make_unique<FsdpEngine>(*loaded.init.model, *g_comm, at::kFloat, at::kFloat);
  loaded.engine->set_gradient_checkpointing(checkpointing);
  return loaded;
}

void zero_shard_grads(ShardedModel& model) {
  for (size_t u = 0; u < model.units().size(); ++u) model.shard(u).mutable_grad().zero_();
}

}  // namespace

// Both ways of running the layers: activations kept (the default) and recomputed in
// backward (actor.gradient_checkpointing).
TEST_CASE("engine: loss and gradients equal a single-process run", "[mpi][engine]") {
  // gemma2 / gemma3_text: scaled embeddings (outside the embed unit), four norms, soft-caps.
  // qwen3_moe, mixtral: routed experts (a token's gradient reaches only its experts).
  for (const auto& name : {"qwen2_tied", "llama", "qwen3", "mistral", "gemma2", "gemma3_text", "gemma3_window",
                           "qwen3_moe", "mixtral"})
    for (bool checkpointing : {false, true}) {
    INFO(name << (checkpointing ? ", gradient checkpointing" : ", activations kept"));
    const std::string path = kFixtures + "/" + name;
    Config cfg;
    cfg.model_path = path;
    cfg.fsdp.memory_efficient_load = true;
    cfg.device = "cpu";
    InitResult init = staged_init(cfg, g_me, *g_comm);
    FsdpEngine engine(*init.model, *g_comm, at::kFloat, at::kFloat);
    engine.set_gradient_checkpointing(checkpointing);
    // The units: an untied head has a unit of its own after the layers.
    const bool tied = init.model->config().tie_word_embeddings;
    CHECK(init.model->units().front().name == (tied ? "root" : "embed"));
    CHECK(init.model->units().back().name ==
          (tied ? "layers." + std::to_string(init.model->config().num_hidden_layers - 1) : std::string("head")));

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
    reference_loss(*reference, all_ids, rows_per_rank, &losses).backward();
    CHECK(std::abs(loss.item<double>() - losses[g_me.rank].item<double>()) < 1e-5);

    check_grads_equal(gathered_grads(*init.model), reference_grads(*reference));
  }
}

// A mixture of experts' load-balancing loss, added by the engine in each layer's
// backward, against the whole model back-propagating loss + weight x aux in one graph.
// Padding (the attention mask) counts for nothing in the aux loss.
TEST_CASE("engine: the routers' load-balancing loss gives the whole model's gradients", "[mpi][engine][moe]") {
  for (const auto& name : {"qwen3_moe", "mixtral"})
    for (bool checkpointing : {false, true}) {
      INFO(name << (checkpointing ? ", gradient checkpointing" : ", activations kept"));
      const std::string path = kFixtures + "/" + name;
      LoadedEngine loaded = load_engine(path, checkpointing);
      InitResult& init = loaded.init;
      FsdpEngine& engine = *loaded.engine;
      const ModelConfig& c = init.model->config();
      const int64_t rows_per_rank = 2, length = 9;
      const double weight = 0.5;  // large, so that a wrong aux gradient shows
      at::Tensor all_ids = at::randint(c.vocab_size, {rows_per_rank * g_me.world_size, length},
                                       at::make_generator<at::CPUGeneratorImpl>(42), at::kLong);
      at::Tensor all_mask = at::ones_like(all_ids);
      all_mask.select(0, 1).narrow(0, length - 3, 3).zero_();  // rank 0's second row: 3 tokens of padding
      at::Tensor my_ids = all_ids.narrow(0, g_me.rank * rows_per_rank, rows_per_rank);
      at::Tensor my_mask = all_mask.narrow(0, g_me.rank * rows_per_rank, rows_per_rank);
      next_token_loss(engine.forward(my_ids, my_mask, RouterLoss{true, weight}), my_ids).backward();
      const RouterStats stats = engine.take_router_stats();
      CHECK(stats.forwards == 1);

      auto reference = load_causal_lm(path, at::kFloat);
      for (auto& p : reference->parameters()) p.requires_grad_(true);
      std::vector<at::Tensor> losses;
      double my_aux = 0;
      for (int r = 0; r < g_me.world_size; ++r) {
        at::Tensor ids = all_ids.narrow(0, r * rows_per_rank, rows_per_rank);
        at::Tensor mask = all_mask.narrow(0, r * rows_per_rank, rows_per_rank);
        std::vector<RouterTally> tallies;
        at::Tensor logits = reference->forward(ids, mask, nullptr, &tallies);
        at::Tensor aux = load_balancing_loss(c, tallies);
        if (r == g_me.rank) my_aux = aux.item<double>();
        losses.push_back(next_token_loss(logits, ids) + weight * aux);
      }
      at::stack(losses).mean().backward();
      CHECK(std::abs(stats.aux_loss_sum.item<double>() - my_aux) < 1e-5);
      check_grads_equal(gathered_grads(*init.model), reference_grads(*reference));
    }
}

// Expert parallelism (actor.backend fsdp:dNeE): each rank runs experts/e of every sparse
// layer for the tokens of its group of e ranks (sent and returned by all-to-all), and
// gathers only the weights it runs; loss, load-balancing loss and gradients are the whole
// model's, both ways of running the layers, with padding. Runs where e divides the ranks.
TEST_CASE("engine: expert parallelism gives the whole model's loss and gradients", "[mpi][engine][moe]") {
  for (int degree : {2, 4}) {
    if (g_me.world_size % degree != 0) continue;
    for (const auto& name : {"qwen3_moe", "qwen3_moe_step", "mixtral"})
      for (bool checkpointing : {false, true}) {
        INFO(name << ", e = " << degree << (checkpointing ? ", gradient checkpointing" : ", activations kept"));
        const std::string path = kFixtures + "/" + name;
        LoadedEngine loaded = load_engine(path, checkpointing);
        FsdpEngine& engine = *loaded.engine;
        engine.set_expert_parallel(degree);
        ShardedModel& model = *loaded.init.model;
        const ModelConfig& c = model.config();
        // A sparse layer's gather holds this rank's experts only: experts/e of them.
        const ExpertParallelism& experts = *engine.expert_parallelism();
        for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
          const size_t unit = static_cast<size_t>(layer) + 1;
          REQUIRE(experts.covers(unit) == c.layer_is_sparse(layer));
          if (!experts.covers(unit)) continue;
          int64_t expert_weights = 0;
          for (const ParamSlot& slot : experts.local_layout(unit).params)
            expert_weights += slot.name.find(".experts.") != std::string::npos;
          CHECK(expert_weights == 3 * c.num_experts / degree);
          CHECK(experts.local_layout(unit).numel < model.units()[unit].numel);
        }

        const int64_t rows_per_rank = 2, length = 9;
        const double weight = 0.5;
        at::Tensor all_ids = at::randint(c.vocab_size, {rows_per_rank * g_me.world_size, length},
                                         at::make_generator<at::CPUGeneratorImpl>(43), at::kLong);
        at::Tensor all_mask = at::ones_like(all_ids);
        all_mask.select(0, 1).narrow(0, length - 3, 3).zero_();
        at::Tensor my_ids = all_ids.narrow(0, g_me.rank * rows_per_rank, rows_per_rank);
        at::Tensor my_mask = all_mask.narrow(0, g_me.rank * rows_per_rank, rows_per_rank);
        at::Tensor loss = next_token_loss(engine.forward(my_ids, my_mask, RouterLoss{true, weight}), my_ids);
        loss.backward();
        const RouterStats stats = engine.take_router_stats();

        auto reference = load_causal_lm(path, at::kFloat);
        for (auto& p : reference->parameters()) p.requires_grad_(true);
        std::vector<at::Tensor> losses;
        double my_loss = 0, my_aux = 0;
        for (int r = 0; r < g_me.world_size; ++r) {
          at::Tensor ids = all_ids.narrow(0, r * rows_per_rank, rows_per_rank);
          at::Tensor mask = all_mask.narrow(0, r * rows_per_rank, rows_per_rank);
          std::vector<RouterTally> tallies;
          at::Tensor logits = reference->forward(ids, mask, nullptr, &tallies);
          at::Tensor token_loss = next_token_loss(logits, ids);
          at::Tensor aux = load_balancing_loss(c, tallies);
          if (r == g_me.rank) {
            my_loss = token_loss.item<double>();
            my_aux = aux.item<double>();
          }
          losses.push_back(token_loss + weight * aux);
        }
        at::stack(losses).mean().backward();
        CHECK(std::abs(loss.item<double>() - my_loss) < 1e-5);
        CHECK(std::abs(stats.aux_loss_sum.item<double>() - my_aux) < 1e-5);
        check_grads_equal(gathered_grads(model), reference_grads(*reference));
      }
  }
}

// LoRA on a mixture of experts with expert parallelism: the adapters (on every expert's
// projections too) get the gradients they get at e = 1, built from the options as a job
// builds them (actor.backend fsdp:dNe2).
TEST_CASE("engine: LoRA adapters train alike with and without expert parallelism", "[mpi][engine][moe][lora]") {
  if (g_me.world_size % 2 != 0) return;  // e = 2 needs an even number of ranks
  auto adapter_grads = [&](const std::string& backend) {
    Config cfg;
    cfg.model_path = kFixtures + "/qwen3_moe";  // Qwen3-MoE's experts have *_proj names: adapted
    cfg.device = "cpu";
    cfg.actor.backend = backend;
    cfg.actor.use_lora = true;
    cfg.actor.lora_rank = 4;
    cfg.actor.lora_alpha = 8;
    cfg.actor.dtype = "float32";
    FsdpModel fsdp = make_fsdp_engine(cfg, g_me, *g_comm);
    CHECK((fsdp.engine->expert_parallelism() != nullptr) == (backend != "fsdp"));
    ShardedModel& model = fsdp.model();
    bool expert_adapters = false;
    for (const UnitLayout& unit : model.adapter_units())
      for (const ParamSlot& slot : unit.params) expert_adapters |= slot.name.find(".experts.") != std::string::npos;
    CHECK(expert_adapters);
    const at::Tensor ids = at::randint(model.config().vocab_size, {2, 9},
                                       at::make_generator<at::CPUGeneratorImpl>(g_me.rank + 5), at::kLong);
    const at::Tensor loss = next_token_loss(fsdp.engine->forward(ids), ids);
    loss.backward();
    std::vector<at::Tensor> grads = {loss.detach()};
    for (at::Tensor& shard : model.trainable_shards()) grads.push_back(shard.grad().clone());
    return grads;
  };
  const auto plain = adapter_grads("fsdp"), parallel = adapter_grads(cat("fsdp:d", g_me.world_size, "e2"));
  REQUIRE(plain.size() == parallel.size());
  for (size_t i = 0; i < plain.size(); ++i) CHECK(at::allclose(parallel[i], plain[i], 1e-5, 1e-7));
  double norm = 0;
  for (size_t i = 1; i < plain.size(); ++i) norm += plain[i].norm().item<double>();
  CHECK(norm > 0);
}

// The summed next-token loss of a rank's logits ([rows, width, columns]: its chunk of
// the rows' positions, first position `first`, its vocabulary columns with tensor
// parallelism) against the rows `ids` [rows, length]; a row's last token has no target.
at::Tensor chunk_loss_sum(FsdpEngine& engine, const at::Tensor& logits, const at::Tensor& ids, int64_t first) {
  const int64_t rows = logits.size(0), width = logits.size(1), length = ids.size(1);
  const at::Tensor targets =
      at::cat({ids.narrow(1, 1, length - 1), at::full({rows, 1}, -100, at::kLong)}, 1).narrow(1, first, width);
  if (const TensorParallelism* tensor = engine.tensor_parallelism()) {
    const at::Tensor real = targets >= 0;
    const at::Tensor logp = vocab_parallel_logprobs(*tensor, logits, targets.clamp_min(0), 1.0, false).logprobs;
    return -(logp * real).sum();
  }
  return at::cross_entropy_loss(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}), {}, at::Reduction::Sum,
                                -100);
}

// The training meshes: ranks ((group x c) + chunk) x t + place. Context parallelism
// (Ulysses): a context group's ranks each hold a chunk of c tokens of the group's rows,
// attention exchanging heads for tokens. Tensor parallelism: a tensor group's ranks run
// the same rows, each its heads, channels and vocabulary columns (the loss over them
// joined without gathering the logits). Every rank's loss share is its group's chunk
// loss over the group's targets, times t x c (the unit gradients are averaged over all
// ranks). Loss and gradients equal the whole model's mean over the groups: c2 and t2
// (np 2), d2c2, c4, t4, d2t2 and t2c2 (np 4); tied and untied heads, biases (a
// row-parallel one on the first rank), soft-caps and Gemma's four norms, per-head norms,
// sliding windows and Gemma 3's local rotary, key/value heads repeated (c4) or shared
// (t4) over ranks, padding, both ways of running.
TEST_CASE("engine: context and tensor parallelism give the whole model's loss and gradients", "[mpi][engine]") {
  struct Mesh {
    int64_t t, c;
  };
  for (const Mesh mesh : {Mesh{1, 2}, Mesh{1, 4}, Mesh{2, 1}, Mesh{4, 1}, Mesh{2, 2}}) {
    if (g_me.world_size % (mesh.t * mesh.c) != 0 || g_me.world_size < mesh.t * mesh.c) continue;
    for (const auto& name : {"qwen2_tied", "llama_mha_bias", "gemma2", "gemma3_window", "mistral_window"})
      for (bool checkpointing : {false, true}) {
        const int64_t sharing = mesh.t * mesh.c, groups = g_me.world_size / sharing;
        INFO(name << ", d" << groups << "t" << mesh.t << "c" << mesh.c
                  << (checkpointing ? ", gradient checkpointing" : ", activations kept"));
        const std::string path = kFixtures + "/" + name;
        LoadedEngine loaded = load_engine(path, checkpointing);
        FsdpEngine& engine = *loaded.engine;
        engine.set_tensor_parallel(static_cast<int>(mesh.t));
        engine.set_context_parallel(static_cast<int>(mesh.c));
        const ModelConfig& c = loaded.init.model->config();
        const int64_t group = g_me.rank / sharing, chunk = (g_me.rank / mesh.t) % mesh.c;
        const int64_t rows = 2, length = 8, local = length / mesh.c;
        at::Tensor all_ids = at::randint(c.vocab_size, {rows * groups, length},
                                         at::make_generator<at::CPUGeneratorImpl>(45), at::kLong);
        at::Tensor all_mask = at::ones_like(all_ids);
        all_mask.select(0, 1).narrow(0, length - 3, 3).zero_();  // group 0's second row ends in padding
        const at::Tensor ids = all_ids.narrow(0, group * rows, rows), mask = all_mask.narrow(0, group * rows, rows);
        const AttentionInputs attention = attention_inputs(c, ids, mask, nullptr, at::kFloat);
        const at::Tensor logits = engine.forward(ids.narrow(1, chunk * local, local).contiguous(), attention);
        CHECK(logits.size(-1) == (mesh.t == 1 ? c.vocab_size : engine.tensor_parallelism()->vocab_rows()));
        const at::Tensor share =
            chunk_loss_sum(engine, logits, ids, chunk * local) / static_cast<double>(rows * (length - 1));
        (share * static_cast<double>(sharing)).backward();
        at::Tensor summed = share.detach().clone();
        g_comm->all_reduce(summed, ReduceOp::Sum);  // each group's loss t times (its tensor ranks')

        auto reference = load_causal_lm(path, at::kFloat);
        for (auto& p : reference->parameters()) p.requires_grad_(true);
        std::vector<at::Tensor> losses;
        for (int64_t g = 0; g < groups; ++g) {
          const at::Tensor r_ids = all_ids.narrow(0, g * rows, rows), r_mask = all_mask.narrow(0, g * rows, rows);
          losses.push_back(next_token_loss(reference->forward(r_ids, r_mask), r_ids));
        }
        const at::Tensor mean = at::stack(losses).mean();
        mean.backward();
        CHECK(std::abs(summed.item<double>() / static_cast<double>(groups * mesh.t) - mean.item<double>()) < 1e-5);
        check_grads_equal(gathered_grads(*loaded.init.model), reference_grads(*reference));
      }
  }
}

// LoRA with tensor and context parallelism: every rank runs the same rows, whole (d = the
// ranks), or its slices of the layers (t = the ranks, and t2c2 at np 4: adapters on a
// column-parallel projection split by lora_B's rows, on a row-parallel one by lora_A's
// columns, the other side whole with its gradient summed over the group) or its chunk of
// them (c = the ranks), loss share x t x c; the adapters get the same gradients, the
// engines built from the options (actor.backend).
TEST_CASE("engine: LoRA adapters train alike with and without tensor and context parallelism", "[mpi][engine][lora]") {
  if (g_me.world_size == 1 || g_me.world_size == 3) return;  // t, c = the ranks: 2 or 4 (the fixture's 4 heads)
  const int64_t rows = 2, length = 8;
  auto adapter_grads = [&](int64_t t, int64_t c) {
    Config cfg;
    cfg.model_path = kFixtures + "/llama_mha_bias";  // 4 key/value heads: c = 4 without repeats
    cfg.device = "cpu";
    cfg.actor.backend = cat("fsdp:d", g_me.world_size / (t * c), "t", t, "c", c);
    cfg.actor.use_lora = true;
    cfg.actor.lora_rank = 4;
    cfg.actor.lora_alpha = 8;
    cfg.actor.dtype = "float32";
    FsdpModel fsdp = make_fsdp_engine(cfg, g_me, *g_comm);
    const ModelConfig& config = fsdp.model().config();
    const at::Tensor ids = at::randint(config.vocab_size, {rows, length}, at::make_generator<at::CPUGeneratorImpl>(9), at::kLong);
    const int64_t local = length / c, chunk = (g_me.rank / t) % c;
    const at::Tensor logits =
        fsdp.engine->forward(ids.narrow(1, chunk * local, local).contiguous(),
                             attention_inputs(config, ids, at::ones_like(ids), nullptr, at::kFloat));
    const at::Tensor sum = chunk_loss_sum(*fsdp.engine, logits, ids, chunk * local);
    (sum * static_cast<double>(t * c) / static_cast<double>(rows * (length - 1))).backward();
    std::vector<at::Tensor> grads;
    for (at::Tensor& shard : fsdp.model().trainable_shards()) grads.push_back(shard.grad().clone());
    return grads;
  };
  const auto whole = adapter_grads(1, 1);
  std::vector<std::pair<int64_t, int64_t>> meshes = {{1, g_me.world_size}, {g_me.world_size, 1}};
  if (g_me.world_size == 4) meshes.push_back({2, 2});
  for (const auto& [t, c] : meshes) {
    INFO("t" << t << "c" << c);
    const auto split = adapter_grads(t, c);
    REQUIRE(whole.size() == split.size());
    double norm = 0;
    for (size_t i = 0; i < whole.size(); ++i) {
      CHECK(at::allclose(split[i], whole[i], 1e-4, 1e-6));
      norm += whole[i].norm().item<double>();
    }
    CHECK(norm > 0);
  }
}

// Routing replay through the Policy and its micro-batches (packed and padded): each
// token goes to the experts recorded for it (position 2 has no record: its own), loss
// and gradients equal to the whole model given the same experts, both ways of running
// the layers; moe_route_agreement is the share of recorded (token, layer) pairs whose
// own top-k, in that forward, is the recorded set.
TEST_CASE("engine: routing replay sends tokens to the recorded experts", "[mpi][engine][moe]") {
  for (const auto& name : {"qwen3_moe", "mixtral"})
    for (bool checkpointing : {false, true})
      for (int64_t max_tokens : {0, 16}) {
        INFO(name << (checkpointing ? ", gradient checkpointing" : ", activations kept") << ", max_tokens_per_mb "
                  << max_tokens);
        const std::string path = kFixtures + "/" + name;
        Config cfg;
        cfg.model_path = path;
        cfg.device = "cpu";
        cfg.actor.dtype = "float32";
        cfg.actor.gradient_checkpointing = checkpointing;
        cfg.actor.router_aux_loss_coef = 0;
        cfg.actor.router_replay = true;
        InitResult init = staged_init(cfg, g_me, *g_comm);
        Policy policy(cfg, *init.model, *g_comm);
        const ModelConfig& c = init.model->config();
        const int64_t k = c.num_experts_per_tok, sparse = c.sparse_layer_count(), width = 9;
        const std::vector<int64_t> lengths = {9, 6, 7};  // each rank's
        const int64_t rows = static_cast<int64_t>(lengths.size()), all_rows = rows * g_me.world_size;
        auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
        const at::Tensor all_ids = at::randint(c.vocab_size, {all_rows, width}, gen, at::kLong);

        // Records: the whole model's own choices at even positions, other experts at odd ones.
        auto reference = load_causal_lm(path, at::kFloat);
        at::Tensor recorded = at::full({all_rows, width, sparse * k}, -1, at::kShort);
        for (int64_t i = 0; i < all_rows; ++i) {
          const int64_t n = lengths[i % rows];
          std::vector<ExpertChoices> own;
          {
            at::NoGradGuard no_grad;
            reference->forward(all_ids[i].narrow(0, 0, n).unsqueeze(0), {}, nullptr, nullptr, &own);
          }
          for (int64_t l = 0; l < sparse; ++l) {
            at::Tensor other = at::rand({n, c.num_experts}, gen).argsort(/*dim=*/int64_t{1}).narrow(1, 0, k);
            at::Tensor pick = (at::arange(n) % 2 == 0).unsqueeze(1);
            recorded[i].narrow(0, 0, n).narrow(1, l * k, k).copy_(at::where(pick, own[l].chosen, other));
          }
          recorded[i][2].fill_(-1);
        }

        // The whole model with the same experts, and the agreement it implies.
        for (auto& p : reference->parameters()) p.requires_grad_(true);
        std::vector<at::Tensor> losses;
        double agreeing = 0, with_record = 0, my_loss = 0;
        for (int r = 0; r < g_me.world_size; ++r) {
          at::Tensor sum = at::zeros({});
          double targets = 0;
          for (int64_t j = 0; j < rows; ++j) {
            const int64_t i = r * rows + j, n = lengths[j];
            std::vector<ExpertChoices> choices(static_cast<size_t>(sparse));
            for (int64_t l = 0; l < sparse; ++l)
              choices[l].replay = recorded[i].narrow(0, 0, n).narrow(1, l * k, k).to(at::kLong);
            const at::Tensor ids = all_ids[i].narrow(0, 0, n).unsqueeze(0);
            const at::Tensor logits = reference->forward(ids, {}, nullptr, nullptr, &choices);
            sum = sum + at::cross_entropy_loss(logits[0].narrow(0, 0, n - 1), ids[0].narrow(0, 1, n - 1), {},
                                               at::Reduction::Sum);
            targets += static_cast<double>(n - 1);
            for (const ExpertChoices& ch : choices) {
              const at::Tensor has = ch.replay.select(1, 0) >= 0;
              const at::Tensor same = (std::get<0>(ch.replay.sort(1)) == std::get<0>(ch.chosen.sort(1))).all(1);
              with_record += has.sum().item<double>();
              agreeing += (same & has).sum().item<double>();
            }
          }
          losses.push_back(sum / targets);
          if (r == g_me.rank) my_loss = losses.back().item<double>();
        }
        at::stack(losses).mean().backward();

        // The same through the Policy's micro-batches.
        PaddedSequences set{all_ids.narrow(0, g_me.rank * rows, rows).contiguous(), lengths,
                            recorded.narrow(0, g_me.rank * rows, rows).contiguous(), {}};
        at::Tensor valid = at::zeros({rows, width - 1});
        for (int64_t j = 0; j < rows; ++j) valid[j].narrow(0, 0, lengths[j] - 1).fill_(1);
        const double targets = valid.sum().item<double>();
        double loss = 0;
        for (const MicroBatch& mb : micro_batches(set, 0, rows, max_tokens, *g_comm, at::Device("cpu"))) {
          const at::Tensor mask = mb.lay_out(valid);
          const at::Tensor logits = mb.forward(policy, PolicyWeights::current, mask.sum().item<double>() / targets);
          const at::Tensor logp = logits.log_softmax(-1).gather(-1, mb.targets().unsqueeze(-1)).squeeze(-1);
          at::Tensor part = -(logp * mask).sum() / targets;
          part.backward();
          loss += part.item<double>();
        }
        CHECK(std::abs(loss - my_loss) < 1e-5);
        check_grads_equal(gathered_grads(*init.model), reference_grads(*reference));
        double agreement = -1, routed = -1;
        for (const auto& [figure, value] : policy.router_figures()) {
          if (figure == "moe_router_agreement") agreement = value;
          if (figure == "moe_route_agreement") routed = value;
        }
        INFO("router agreement " << agreement << ", the whole model's " << agreeing / with_record);
        CHECK(std::abs(agreement - agreeing / with_record) < 1e-12);
        CHECK((agreement > 0.2 && agreement < 0.9));  // the odd positions' records are not the router's
        CHECK(routed == 1.0);  // replayed: every recorded (token, layer) went to the rollout's experts
      }
}

// The head on some positions only (those with a loss): their logits, and the gradients of
// a loss on them, equal the full forward's (tied and untied heads).
TEST_CASE("engine: the head on given positions gives their logits and the same gradients", "[mpi][engine]") {
  for (const auto& name : {"qwen2_tied", "llama"}) {
    INFO(name);
    const std::string path = kFixtures + "/" + name;
    LoadedEngine full = load_engine(path, false), part = load_engine(path, false);
    const int64_t rows = 2, length = 9, vocab = full.init.model->config().vocab_size;
    at::Tensor ids = at::randint(vocab, {rows, length}, at::make_generator<at::CPUGeneratorImpl>(40 + g_me.rank), at::kLong);
    const at::Tensor positions = at::tensor({1, 4, 5, 8, 12, 17}, at::kLong);  // of the rows x length, row-major
    const at::Tensor targets = at::randint(vocab, {positions.size(0)}, at::make_generator<at::CPUGeneratorImpl>(3), at::kLong);
    at::Tensor all = full.engine->forward(ids).reshape({-1, vocab}).index_select(0, positions);
    at::cross_entropy_loss(all, targets).backward();
    at::Tensor some = part.engine->forward(ids, at::Tensor(), RouterLoss{}, positions);
    REQUIRE(some.sizes() == all.sizes());
    CHECK(at::allclose(some, all.detach(), 1e-5, 1e-6));
    at::cross_entropy_loss(some, targets).backward();
    check_grads_equal(gathered_grads(*part.init.model), gathered_grads(*full.init.model));
  }
}

// Two forwards before any backward: each forward's graph must keep its own inputs
// (ids, masks, positions). Tied embeddings make the root unit's gradient depend on
// both the embedding's and the head's saved inputs.
TEST_CASE("engine: two forwards, then their backwards, equal a single-process run", "[mpi][engine]") {
  for (const auto& name : {"qwen2_tied", "llama"}) for (bool checkpointing : {false, true}) {
    INFO(name << (checkpointing ? ", gradient checkpointing" : ", activations kept"));
    const std::string path = kFixtures + "/" + name;
    LoadedEngine loaded = load_engine(path, checkpointing);
    InitResult& init = loaded.init;
    FsdpEngine& engine = *loaded.engine;
    const int64_t rows = 2, vocab = init.model->config().vocab_size, n = g_me.world_size;
    auto batch = [&](int64_t seed, int64_t length) {
      return at::randint(vocab, {rows * n, length}, at::make_generator<at::CPUGeneratorImpl>(seed), at::kLong);
    };
    const at::Tensor all_a = batch(7, 9), all_b = batch(8, 6);  // different lengths: different masks and positions
    const at::Tensor mine_a = all_a.narrow(0, g_me.rank * rows, rows), mine_b = all_b.narrow(0, g_me.rank * rows, rows);

    // The reference: the mean over ranks of each batch's loss, separately and summed.
    auto reference = load_causal_lm(path, at::kFloat);
    for (auto& p : reference->parameters()) p.requires_grad_(true);
    reference_loss(*reference, all_a, rows).backward();
    const auto want_a = reference_grads(*reference);
    reference_loss(*reference, all_b, rows).backward();
    const auto want_sum = reference_grads(*reference);

    {  // backward of the sum of both losses
      at::Tensor loss_a = next_token_loss(engine.forward(mine_a), mine_a);
      at::Tensor loss_b = next_token_loss(engine.forward(mine_b), mine_b);
      (loss_a + loss_b).backward();
      check_grads_equal(gathered_grads(*init.model), want_sum);
    }
    zero_shard_grads(*init.model);
    {  // backward of each loss in turn, the first forward's first
      at::Tensor loss_a = next_token_loss(engine.forward(mine_a), mine_a);
      at::Tensor loss_b = next_token_loss(engine.forward(mine_b), mine_b);
      loss_a.backward();
      check_grads_equal(gathered_grads(*init.model), want_a);
      loss_b.backward();
      check_grads_equal(gathered_grads(*init.model), want_sum);
    }
  }
}

// fsdp.prefetch_depth changes when bytes move, never which: gathers started ahead and
// gradient reductions left in flight give the same losses and gradients to the bit as
// depth 0 (every collective in place), in float32 and bfloat16, with activations kept
// and recomputed, for a tied and an untied head, over two forwards before one backward
// (the second forward's prefetch runs while the first's graph waits). At depth > 0 every
// gather of the forwards and backwards was one started ahead.
TEST_CASE("engine: prefetch depths 0 1 and 2 give bit-identical losses and gradients", "[mpi][engine][prefetch]") {
  for (const auto& name : {"qwen2_tied", "llama"})
    for (at::ScalarType dtype : {at::kFloat, at::kBFloat16})
      for (bool checkpointing : {false, true}) {
        INFO(name << ", " << dtype << (checkpointing ? ", gradient checkpointing" : ", activations kept"));
        Config cfg;
        cfg.model_path = kFixtures + "/" + name;
        cfg.device = "cpu";
        InitResult init = staged_init(cfg, g_me, *g_comm);
        ShardedModel& model = *init.model;
        const int64_t vocab = model.config().vocab_size, layers = model.config().num_hidden_layers;
        const at::Tensor ids_a = at::randint(vocab, {2, 9}, at::make_generator<at::CPUGeneratorImpl>(g_me.rank + 11), at::kLong);
        const at::Tensor ids_b = at::randint(vocab, {3, 6}, at::make_generator<at::CPUGeneratorImpl>(g_me.rank + 21), at::kLong);

        std::vector<at::Tensor> want;  // depth 0: the loss, then every shard's gradient
        for (int64_t depth : {0, 1, 2}) {
          INFO("prefetch_depth " << depth);
          FsdpEngine engine(model, *g_comm, dtype, at::kFloat);
          engine.set_prefetch_depth(depth);
          engine.set_gradient_checkpointing(checkpointing);
          for (at::Tensor& shard : model.trainable_shards()) shard.mutable_grad() = at::Tensor();
          at::Tensor loss = next_token_loss(engine.forward(ids_a), ids_a) + next_token_loss(engine.forward(ids_b), ids_b);
          loss.backward();
          std::vector<at::Tensor> got = {loss.detach()};
          for (at::Tensor& shard : model.trainable_shards()) {
            REQUIRE(shard.grad().defined());
            got.push_back(shard.grad().clone());
          }
          if (depth == 0) {
            want = got;
            continue;
          }
          REQUIRE(got.size() == want.size());
          for (size_t i = 0; i < got.size(); ++i) {
            INFO((i == 0 ? std::string("the loss") : "unit " + std::to_string(i - 1)));
            CHECK(at::equal(got[i], want[i]));
          }
          // Gathers: every use in forward (embed, layers, head), the layers and head
          // again in backward; none on one float32 rank, where shards are whole units.
          const bool gathers = g_me.world_size > 1 || dtype != at::kFloat;
          CHECK(engine.overlap().gathers_taken_started() == (gathers ? 2 * ((layers + 2) + (layers + 1)) : 0));
        }
      }
}

// With LoRA the adapters are on or off per forward: a backward follows its forward,
// whatever the switch says by the time the backward runs.
TEST_CASE("engine: the adapter switch counts at forward time, not at backward time", "[mpi][engine][lora]") {
  const bool checkpointing = GENERATE(false, true);
  INFO((checkpointing ? "gradient checkpointing" : "activations kept"));
  Config cfg;
  cfg.model_path = kFixtures + "/qwen2_untied";
  cfg.device = "cpu";
  cfg.actor.use_lora = true;
  cfg.actor.lora_rank = 4;
  cfg.actor.lora_alpha = 8;
  cfg.actor.dtype = "float32";
  cfg.actor.gradient_checkpointing = checkpointing;
  FsdpModel fsdp = make_fsdp_engine(cfg, g_me, *g_comm);
  ShardedModel& model = fsdp.model();
  FsdpEngine& engine = *fsdp.engine;
  at::Tensor ids = at::randint(model.config().vocab_size, {2, 7}, at::make_generator<at::CPUGeneratorImpl>(g_me.rank + 3),
                               at::kLong);
  auto adapter_grads = [&] {
    std::vector<at::Tensor> grads;
    for (at::Tensor& shard : model.trainable_shards()) {
      grads.push_back(shard.grad().defined() ? shard.grad().clone() : at::zeros_like(shard));
      if (shard.grad().defined()) shard.mutable_grad().zero_();
    }
    return grads;
  };
  next_token_loss(engine.forward(ids), ids).backward();  // adapters on throughout
  const auto want = adapter_grads();
  double norm = 0;
  for (const auto& g : want) norm += g.norm().item<double>();
  CHECK(norm > 0);  // lora_B gets a gradient even while B = 0

  at::Tensor loss = next_token_loss(engine.forward(ids), ids);  // adapters on ...
  engine.set_adapters_enabled(false);                           // ... switched off before the backward
  loss.backward();
  engine.set_adapters_enabled(true);
  const auto got = adapter_grads();
  for (size_t i = 0; i < want.size(); ++i) CHECK(at::allclose(got[i], want[i], 1e-5, 1e-7));

  engine.set_adapters_enabled(false);  // and a forward with adapters off trains nothing (the base is frozen)
  at::Tensor base_loss = next_token_loss(engine.forward(ids), ids);
  engine.set_adapters_enabled(true);
  CHECK_FALSE(base_loss.requires_grad());
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

TEST_CASE("engine: after zero_grad a backward's gradients replace the last step's, not add to them", "[mpi][engine][optim]") {
  // One rank writes a step's first gradient into storage kept from the step before
  // (FsdpEngine::kept_gradient): the same batch twice, zero_grad between, gives the
  // same gradients, and a second backward without zero_grad adds.
  Config cfg;
  cfg.model_path = kFixtures + "/qwen2_untied";
  cfg.device = "cpu";
  InitResult init = staged_init(cfg, g_me, *g_comm);
  FsdpEngine engine(*init.model, *g_comm, at::kFloat, at::kFloat);
  std::vector<at::Tensor> shards;
  for (size_t u = 0; u < init.model->units().size(); ++u) shards.push_back(init.model->shard(u));
  ShardedAdamW optimizer(shards, cfg.optimizer, *g_comm);
  at::Tensor ids = at::randint(init.model->config().vocab_size, {2, 7},
                               at::make_generator<at::CPUGeneratorImpl>(g_me.rank + 3), at::kLong);
  auto backward = [&] { next_token_loss(engine.forward(ids), ids).backward(); };
  backward();
  std::vector<at::Tensor> first;
  for (const at::Tensor& shard : shards) first.push_back(shard.grad().clone());
  optimizer.zero_grad();
  for (const at::Tensor& shard : shards) CHECK_FALSE(shard.grad().defined());
  backward();
  for (size_t u = 0; u < shards.size(); ++u) CHECK(at::equal(shards[u].grad(), first[u]));
  backward();
  for (size_t u = 0; u < shards.size(); ++u) CHECK(at::allclose(shards[u].grad(), first[u] * 2, 1e-5, 1e-7));
}

TEST_CASE("optimizer: a shard without a gradient is left out of the step, as torch.optim leaves it", "[mpi][optim]") {
  at::Tensor trained = at::ones({4}, at::kFloat).requires_grad_(true), idle = at::ones({3}, at::kFloat).requires_grad_(true);
  OptimizerConfig config;
  config.weight_decay = 0.1;  // would move the idle shard were it stepped with a zero gradient
  ShardedAdamW optimizer({trained, idle}, config, *g_comm);
  trained.mutable_grad() = at::full({4}, 0.5);
  const StepResult result = optimizer.step(0.1);
  CHECK_FALSE(result.skipped);
  CHECK_FALSE(at::equal(trained.detach(), at::ones({4})));
  CHECK(at::equal(idle.detach(), at::ones({3})));
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
    reference_loss(*reference, all_ids, rows).backward();
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

// actor.dtype's default: bfloat16 compute on float32 master shards, against the float32
// single-process reference. bfloat16 keeps 8 bits of mantissa (relative rounding
// 2^-9 = 0.2%), and each layer adds its rounding, so the tolerances are relative L2
// errors per tensor, stated here:
//   loss                      1e-2   (a mean over tokens: errors average out)
//   each gradient             6e-2   (gradients of small tensors are noisier)
//   each tensor's update      2.5e-1 after 3 AdamW steps (Adam divides by sqrt(v), so
//                             the update direction of tiny gradients is what bf16 blurs);
//                             the key bias, whose true gradient is 0, moves at most lr a step
TEST_CASE("engine: bfloat16 compute stays within stated tolerances of a float32 run", "[mpi][engine][bf16]") {
  const std::string path = kFixtures + "/qwen2_untied";
  Config cfg;
  cfg.model_path = path;
  cfg.device = "cpu";
  cfg.optimizer.lr = 1e-3;
  cfg.optimizer.gradient_clipping = 0;
  InitResult init = staged_init(cfg, g_me, *g_comm);
  FsdpEngine engine(*init.model, *g_comm, at::kBFloat16, at::kFloat);
  ShardedAdamW optimizer(init.model->trainable_shards(), cfg.optimizer, *g_comm);

  auto reference = load_causal_lm(path, at::kFloat);
  for (auto& p : reference->parameters()) p.requires_grad_(true);
  std::map<std::string, at::Tensor> initial;
  for (const auto& item : reference->named_parameters()) initial[item.key()] = item.value().detach().clone();
  torch::optim::AdamW reference_optimizer(
      reference->parameters(), torch::optim::AdamWOptions(cfg.optimizer.lr).betas({cfg.optimizer.beta1, cfg.optimizer.beta2})
                                   .eps(cfg.optimizer.eps).weight_decay(cfg.optimizer.weight_decay));
  auto relative_error = [](const at::Tensor& got, const at::Tensor& want) {
    return (got.to(at::kFloat) - want).norm().item<double>() / std::max(want.norm().item<double>(), 1e-12);
  };

  const int64_t rows = 2, vocab = init.model->config().vocab_size;
  for (int step = 0; step < 3; ++step) {
    at::Tensor all_ids = at::randint(vocab, {rows * g_me.world_size, 12},
                                     at::make_generator<at::CPUGeneratorImpl>(200 + step), at::kLong);
    at::Tensor mine = all_ids.narrow(0, g_me.rank * rows, rows);
    optimizer.zero_grad();
    at::Tensor loss = next_token_loss(engine.forward(mine), mine);
    loss.backward();

    reference_optimizer.zero_grad();
    std::vector<at::Tensor> losses;
    reference_loss(*reference, all_ids, rows, &losses).backward();
    INFO("step " << step);
    CHECK(relative_error(loss.detach(), losses[g_me.rank].detach()) < 1e-2);
    if (step == 0) {
      for (const auto& [param, grad] : gathered_grads(*init.model)) {
        INFO(param);
        CHECK(relative_error(grad, reference->named_parameters()[param].grad()) < 6e-2);
      }
    }
    optimizer.step(cfg.optimizer.lr);
    reference_optimizer.step();
  }
  for (size_t u = 0; u < init.model->units().size(); ++u) {
    at::Tensor full = init.model->gather_unit(u, *g_comm, at::kFloat);
    for (const auto& [param, value] : init.model->unit_views(u, full)) {
      INFO(param);
      at::Tensor want = reference->named_parameters()[param].detach() - initial.at(param);
      if (param.find("k_proj.bias") != std::string::npos) {
        // Softmax ignores a key bias (it adds the same q.b to every key of a query), so
        // this gradient is 0 in exact arithmetic and rounding noise in practice; Adam
        // turns any noise into steps of about lr. Bound: 3 steps of at most lr each.
        CHECK((value - initial.at(param)).abs().max().item<double>() <= 3 * cfg.optimizer.lr * 1.01);
      } else {
        CHECK(relative_error(value - initial.at(param), want) < 2.5e-1);
      }
    }
  }
}
