// Forward and backward on the shards (DESIGN.md, "Sharding unit").
//
// Each use of a unit is one autograd Function whose inputs are the activations and the
// unit's float32 shard. Forward all-gathers the unit in the compute dtype and runs it;
// backward gathers again, back-propagates, and reduce-scatters the unit's flat gradient
// (averaged over ranks, in grad_reduce_dtype) into the shard's gradient. Between the
// two the gathered weights are gone. The layers either keep their activations (the
// graph recorded in forward, FSDP2's way; the default, AReaL's
// actor.gradient_checkpointing false) or recompute them in backward from their input
// (gradient checkpointing). The embedding's backward needs no weights; the head keeps
// its graph. Units: the embedding, one per decoder layer, and the final norm with the
// head; a head tied to the embedding shares the root unit with it, and that unit's
// gradient is the sum of both uses, as autograd accumulates it.
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <unordered_map>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/sharded_model.h"
#include "areal/fsdp/staged_init.h"
#include "areal/model/functional.h"

namespace areal {

class BufferPool;
class ContextParallelism;
class ExpertParallelism;
class Overlap;
class TensorParallelism;
struct ForwardRecord;

// What a forward does with a mixture of experts' routers (nothing for a dense model).
struct RouterLoss {
  bool tally = false;  // with a graph: count its routers' choices into take_router_stats()
  // != 0: its backward adds the gradient of weight x its load-balancing loss
  // (transformers' load_balancing_loss_func over this forward's real tokens), as if that
  // term were part of the loss back-propagated; tallies too.
  double weight = 0;
  // The experts the rollout sent each token to, [B, T, sparse layers x k] (int16, -1: no
  // record), or undefined. A tallied forward counts the tokens whose own top-k are those
  // experts (RouterStats); with `replay` every recorded token goes to its recorded
  // experts instead of its own (routing replay; the gate weights stay this router's).
  at::Tensor experts;
  bool replay = false;
};

// A mixture of experts' routers over the forwards with a graph since the last
// take_router_stats (for the step's moe_* statistics); undefined tensors before any.
struct RouterStats {
  int64_t forwards = 0;
  at::Tensor aux_loss_sum;   // float64 scalar: each forward's load-balancing loss, summed
  at::Tensor expert_tokens;  // [sparse layers, experts] float64: top-k choices per expert, summed
  // Tokens x sparse layers with a recorded choice (RouterLoss::experts), those of them
  // that went to the recorded experts (replayed, or the router's own top-k equal to them)
  // and those whose router's own top-k equals them (float64 scalars; undefined without
  // records).
  at::Tensor recorded_routes, agreeing_routes, router_agreeing_routes;
};

class FsdpEngine {
 public:
  FsdpEngine(ShardedModel& model, Communicator& comm, at::ScalarType compute_dtype, at::ScalarType grad_reduce_dtype);
  ~FsdpEngine();

  // Logits [B, T, vocab] in the compute dtype. The shards require grad; a backward
  // from these logits leaves each rank's shard gradients in shard(u).grad().
  // Collective: every rank calls it (with its own batch), and backward likewise.
  // Each forward's graph owns what its backward needs: several forwards may run before
  // their backwards, in any order (gradient accumulation over a summed loss, actor and
  // reference in one graph).
  // `router`: a mixture of experts' routers (RouterLoss). `head_rows` (int64, indices
  // into the B x T positions in row-major order): the head runs on those positions only
  // and the logits are [rows, vocab] (the positions with a loss; none given: all).
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {}, RouterLoss router = {},
                     const at::Tensor& head_rows = {});
  // The same with the attention inputs made by the caller (packed sequences:
  // packed_attention_inputs in model/functional.h).
  at::Tensor forward(const at::Tensor& input_ids, const AttentionInputs& attention, RouterLoss router = {},
                     const at::Tensor& head_rows = {});
  // This rank's router tallies since the last call, and a fresh start.
  RouterStats take_router_stats();

  // With LoRA: run the base model alone (the frozen reference policy at no extra
  // memory) while false.
  void set_adapters_enabled(bool enabled) { adapters_enabled_ = enabled; }
  bool adapters_enabled() const { return adapters_enabled_ && model_.has_adapters(); }

  // actor.gradient_checkpointing: recompute each layer in backward (less memory)
  // instead of keeping its activations (default). Read at forward time.
  void set_gradient_checkpointing(bool on) { gradient_checkpointing_ = on; }
  bool gradient_checkpointing() const { return gradient_checkpointing_; }

  // fsdp.prefetch_depth: how many units' all-gathers run ahead of the unit computing
  // (forward and backward), and how many gradient reduce-scatters stay in flight
  // (overlap.h). 0: every collective waits in place. Results are the same at any depth.
  void set_prefetch_depth(int64_t depth) { prefetch_depth_ = depth < 0 ? 0 : static_cast<size_t>(depth); }
  size_t prefetch_depth() const { return prefetch_depth_; }

  // Expert parallelism (expert_parallel.h): a mixture of experts' sparse layers run their
  // experts in groups of `degree` ranks. Collective (makes the groups); 1: none.
  void set_expert_parallel(int degree);
  // The same expert- and context-parallel groups as another engine's over the same
  // layout (a reference model's engine).
  void share_parallel_groups(const FsdpEngine& other) {
    experts_ = other.experts_;
    context_ = other.context_;
    tensor_ = other.tensor_;
  }
  ExpertParallelism* expert_parallelism() const { return experts_.get(); }
  // Context parallelism (context_parallel.h): each rank of a group of `degree` runs a
  // chunk of every sequence's tokens (forward's ids are this rank's chunk, the attention
  // inputs the whole sequence's). Collective (makes the groups); 1: none.
  void set_context_parallel(int degree);
  ContextParallelism* context_parallelism() const { return context_.get(); }
  // Tensor parallelism (tensor_parallel.h): each rank of a group of `degree` runs its
  // heads, channels and vocabulary rows of the same rows; forward's logits are this
  // rank's vocabulary columns (TensorParallelism::vocab_begin on). Collective (makes the
  // groups); 1: none. Before set_context_parallel (its groups span the tensor groups).
  void set_tensor_parallel(int degree);
  TensorParallelism* tensor_parallelism() const { return tensor_.get(); }

  // Gathered-weight and gradient buffers, kept between uses (buffer_pool.h).
  BufferPool& buffers() { return *buffers_; }
  // On one rank, a shard's float32 gradient storage, kept between steps: a step's first
  // gradient of the shard is written into it in place (a fresh tensor each step would
  // fault its pages in again).
  at::Tensor kept_gradient(const at::Tensor& shard);
  // The collectives in flight beside the compute (overlap.h).
  Overlap& overlap() { return *overlap_; }
  // Called from a unit's backward: at the end of this backward pass, the pending
  // reductions are finished into the shards' gradients (before backward() returns).
  void finish_overlap_after_backward();

  ShardedModel& model() { return model_; }
  Communicator& comm() { return comm_; }
  at::ScalarType compute_dtype() const { return compute_dtype_; }
  at::ScalarType grad_reduce_dtype() const { return grad_reduce_dtype_; }

 private:
  ShardedModel& model_;
  Communicator& comm_;
  at::ScalarType compute_dtype_;
  at::ScalarType grad_reduce_dtype_;
  bool adapters_enabled_ = true;  // read at forward time; each use keeps what it saw
  bool gradient_checkpointing_ = false;
  size_t prefetch_depth_ = 1;
  int64_t next_forward_id_ = 0;
  bool overlap_finish_queued_ = false;
  std::unique_ptr<BufferPool> buffers_;
  std::unique_ptr<Overlap> overlap_;
  std::shared_ptr<ExpertParallelism> experts_;
  std::shared_ptr<ContextParallelism> context_;
  std::shared_ptr<TensorParallelism> tensor_;
  RouterStats router_stats_;
  std::unordered_map<const void*, at::Tensor> kept_gradients_;  // by the shard's TensorImpl

  void finish_overlap();
  void finish_router_tallies(ForwardRecord& record);
};

// The engine the config asks for over `model`: compute in actor.dtype, gradients
// reduced in actor.grad_reduce_dtype, actor.gradient_checkpointing,
// fsdp.prefetch_depth and actor.backend's expert parallelism (e). The one place these options become an engine (Policy and
// make_fsdp_engine both build theirs here).
std::unique_ptr<FsdpEngine> make_engine(const Config& cfg, ShardedModel& model, Communicator& comm);

// What make_fsdp_engine builds: the sharded model (with the figures of its staged
// initialization) and the engine that runs it.
struct FsdpModel {
  InitResult init;
  std::unique_ptr<FsdpEngine> engine;
  ShardedModel& model() { return *init.model; }
};

// The C++ entry point: the staged initialization from `cfg` (checkpoint or seed,
// memory-efficient or plain, LoRA), then an engine in actor.dtype with gradients
// reduced in actor.grad_reduce_dtype. Collective. An optimizer goes on
// model().trainable_shards().
//
//   areal::Config cfg;
//   cfg.model_path = "/models/qwen";
//   cfg.fsdp.memory_efficient_load = true;
//   cfg.actor.use_lora = true;
//   areal::FsdpModel fsdp = areal::make_fsdp_engine(cfg, me, comm);
FsdpModel make_fsdp_engine(const Config& cfg, const RankInfo& me, Communicator& comm);

}  // namespace areal
