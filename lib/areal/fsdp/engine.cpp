#include "areal/fsdp/engine.h"
#include "areal/fsdp/policy.h"

#include "areal/config/allocation.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>
#include <torch/csrc/autograd/engine.h>
#include <ATen/core/ivalue.h>

#include <functional>
#include <optional>
#include <utility>

#include "areal/fsdp/buffer_pool.h"
#include "areal/fsdp/context_parallel.h"
#include "areal/fsdp/expert_parallel.h"
#include "areal/fsdp/overlap.h"
#include "areal/fsdp/tensor_parallel.h"
#include "areal/model/functional.h"
#include "areal/model/tensor_slices.h"
#include "areal/util/strings.h"

namespace areal {

// One forward's uses in order, shared by their autograd contexts, so that a use's
// backward knows which units the backward needs next (the uses before it) and can start
// gathering them (fsdp.prefetch_depth). Filled as the forward runs.
struct ForwardRecord : torch::CustomClassHolder {
  struct Use {
    size_t unit = 0;
    bool with_adapter = false;
    bool gathers_in_backward = false;  // a layer or the head whose backward runs
    at::Tensor flat, adapter_flat;     // a recorded graph's flats (keep_graph), after its forward
  };
  int64_t id = 0;
  std::vector<Use> uses;
  // A mixture of experts' routers in a forward with a graph: each sparse layer's tally
  // (values, in layer order) and, with a load-balancing loss, its gradient with respect
  // to every layer's probability sum (the same for all: weight * experts * C / R^2, C
  // the choices of all layers, R their tokens), known once the forward has run them all.
  bool tally_routers = false;
  double router_aux_weight = 0;
  std::vector<RouterTally> routers;
  at::Tensor router_aux_grad;
  // Recorded routes (RouterLoss::experts) met by the tallied layers, those that went to
  // the recorded experts (replayed, or the router's own top-k agreeing), and those the
  // routers' own top-k agreed with (float64 scalars, summed over the layers).
  at::Tensor recorded_routes, agreeing_routes, router_agreeing_routes;
};

// Whether `unit` is a sparse layer whose experts this engine runs expert-parallel.
static bool runs_local_experts(const FsdpEngine& engine, size_t unit) {
  return engine.expert_parallelism() && engine.expert_parallelism()->covers(unit);
}

// What one use of a unit computes. Everything a use needs in its backward is here,
// fixed at forward time, and travels in the autograd context's saved data (save/load),
// so each forward's graph owns its own: a second forward before the backward of the
// first, or a toggle of the adapters in between, changes nothing of the first.
struct UnitCall {
  enum class Kind : int64_t { Embed, Layer, Head };
  FsdpEngine* engine = nullptr;  // outlives the graphs of its forwards
  size_t unit = 0;
  Kind kind = Kind::Layer;
  at::Tensor input_ids;        // Embed
  AttentionInputs attention;   // Layer
  at::Tensor head_rows;        // Head: the positions it runs on (undefined: all)
  at::Tensor replay;           // a sparse Layer: ExpertChoices::replay (routing replay), or undefined
  at::Tensor recorded;         // a tallied sparse Layer: the rollout's choices [N, k] to agree with (forward only)
  bool with_adapter = false;   // LoRA on, as it was when the forward ran
  bool keep_graph = false;     // forward records the graph; backward does not recompute
  c10::intrusive_ptr<ForwardRecord> record;  // this use is record->uses[use]
  size_t use = 0;

  void save(torch::autograd::AutogradContext* ctx) const {
    auto& d = ctx->saved_data;
    d["record"] = c10::IValue::make_capsule(record);
    d["use"] = static_cast<int64_t>(use);
    d["engine"] = reinterpret_cast<int64_t>(engine);
    d["unit"] = static_cast<int64_t>(unit);
    d["kind"] = static_cast<int64_t>(kind);
    d["with_adapter"] = with_adapter;
    d["keep_graph"] = keep_graph;
    d["input_ids"] = input_ids;
    d["head_rows"] = head_rows;
    d["replay"] = replay;
    d["cos"] = attention.cos;
    d["sin"] = attention.sin;
    d["cos_local"] = attention.cos_local;
    d["sin_local"] = attention.sin_local;
    d["mask"] = attention.mask;
    d["mask_local"] = attention.mask_local;
    d["sequence_starts"] = attention.sequence_starts;
    d["present"] = attention.present;
  }
  static UnitCall load(torch::autograd::AutogradContext* ctx) {
    const auto& d = ctx->saved_data;
    UnitCall call;
    call.record = c10::static_intrusive_pointer_cast<ForwardRecord>(d.at("record").toCapsule());
    call.use = static_cast<size_t>(d.at("use").toInt());
    call.engine = reinterpret_cast<FsdpEngine*>(d.at("engine").toInt());
    call.unit = static_cast<size_t>(d.at("unit").toInt());
    call.kind = static_cast<Kind>(d.at("kind").toInt());
    call.with_adapter = d.at("with_adapter").toBool();
    call.keep_graph = d.at("keep_graph").toBool();
    call.input_ids = d.at("input_ids").toTensor();
    call.head_rows = d.at("head_rows").toTensor();
    call.replay = d.at("replay").toTensor();
    call.attention.cos = d.at("cos").toTensor();
    call.attention.sin = d.at("sin").toTensor();
    call.attention.cos_local = d.at("cos_local").toTensor();
    call.attention.sin_local = d.at("sin_local").toTensor();
    call.attention.mask = d.at("mask").toTensor();
    call.attention.mask_local = d.at("mask_local").toTensor();
    call.attention.sequence_starts = d.at("sequence_starts").toTensor();
    call.attention.present = d.at("present").toTensor();
    return call;
  }

  GatherKey key(bool adapter, bool backward) const {
    return {record->id, static_cast<int64_t>(use), adapter, backward};
  }
  // A sparse layer under expert parallelism gathers only the weights this rank runs.
  bool expert_parallel() const { return runs_local_experts(*engine, unit); }
  const UnitLayout& base_layout() const {
    return expert_parallel() ? engine->expert_parallelism()->local_layout(unit) : engine->model().units().at(unit);
  }
  const UnitLayout& adapter_layout() const { return engine->model().adapter_units().at(unit - 1); }
  // The unit whose gradient this use produces: the adapters with LoRA (nullptr for a
  // use without them: the base is frozen), else the base unit.
  const UnitLayout* trained_layout() const {
    if (!engine->model().has_adapters()) return &base_layout();
    return with_adapter ? &adapter_layout() : nullptr;
  }
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The parameters of one use as views of its gathered flats, by name. The trained
// unit's parameters are leaves of their own that share the flat's memory, one per slot
// of its layout in order: autograd then hands back one gradient per parameter, written
// once into the flat gradient buffer (a gradient of the whole flat would cost a
// zero-filled copy of the unit per parameter).
struct UseWeights {
  std::map<std::string, at::Tensor> by_name;
  std::vector<at::Tensor> trained;
};

UseWeights use_weights(const UnitCall& call, const at::Tensor& flat, const at::Tensor& adapter_flat, bool leaves) {
  UseWeights w;
  const UnitLayout* trained = call.trained_layout();
  auto add = [&](const UnitLayout& layout, const at::Tensor& buffer) {
    const bool make_leaves = leaves && &layout == trained;
    for (const ParamSlot& slot : layout.params) {
      at::Tensor view = buffer.narrow(0, slot.offset, slot.numel).view(slot.shape);
      if (make_leaves) {
        view = view.detach().requires_grad_(true);
        w.trained.push_back(view);
      }
      w.by_name[slot.name] = view;
    }
  };
  add(call.base_layout(), flat);
  if (adapter_flat.defined()) add(call.adapter_layout(), adapter_flat);
  return w;
}

// Runs a layer or the head on `x` with the weights of one use; a sparse layer's router
// tally goes to `router` when given, and it replays call.replay (its own choices go to
// `chosen` when given).
at::Tensor run_use(const UnitCall& call, const at::Tensor& x, const UseWeights& w, RouterTally* router = nullptr,
                   at::Tensor* chosen = nullptr) {
  ShardedModel& model = call.engine->model();
  const ModelConfig& config = model.config();
  const TensorParallelism* tensor = call.engine->tensor_parallelism();
  if (call.kind == UnitCall::Kind::Head) {
    auto head = w.by_name.find("lm_head.weight");
    const at::Tensor positions =
        call.head_rows.defined() ? x.reshape({-1, x.size(-1)}).index_select(0, call.head_rows) : x;
    const at::Tensor& head_weight = head != w.by_name.end() ? head->second : w.by_name.at("model.embed_tokens.weight");
    if (tensor)  // this rank's vocabulary columns
      return lm_logits(config, w.by_name.at("model.norm.weight"), tensor->vocab_slice(head_weight), positions,
                       &tensor->layer_parallel());
    return lm_logits(config, w.by_name.at("model.norm.weight"), head_weight, positions);
  }
  const std::string prefix = cat("model.layers.", call.unit - 1, ".");
  auto lookup = [&](const std::string& name) {
    auto it = w.by_name.find(prefix + name);
    if (it == w.by_name.end()) return at::Tensor();
    return tensor ? tensor->layer_weight(name, it->second) : it->second;  // this rank's slice
  };
  at::Tensor keys, values;  // no cache in training
  ExpertChoices choices{call.replay, {}};
  const bool routed = call.replay.defined() || chosen;
  const ExpertParallel* experts = call.expert_parallel() ? &call.engine->expert_parallelism()->layer_parallel() : nullptr;
  ContextParallelism* sequence = call.engine->context_parallelism();
  const ContextParallel* context = sequence ? &sequence->layer_parallel() : nullptr;
  PartialSumReduce reduce;
  if (tensor) reduce = [tensor](at::Tensor& partial) { partial = tensor->sum(partial); };
  at::Tensor out = decoder_layer(tensor ? tensor->local_config() : config, call.unit - 1, lookup, x, call.attention,
                                 keys, values, model.adapter_scale(), reduce, router, routed ? &choices : nullptr,
                                 {experts, context, tensor ? &tensor->layer_parallel() : nullptr});
  if (chosen) *chosen = choices.chosen;
  return out;
}

// `sum` += `value`, `sum` undefined until the first.
void add_into(at::Tensor& sum, const at::Tensor& value) { sum = sum.defined() ? sum + value : value; }

// A tallied sparse layer's agreement with the rollout's choices (call.recorded): the
// tokens with a record, those whose experts in this forward (replayed where call.replay
// has a row, else the router's own top-k `chosen`) are the same set, and those whose own
// top-k is, into the record.
void count_agreement(const UnitCall& call, const at::Tensor& chosen) {
  const at::Tensor recorded = call.recorded.to(chosen.device());
  const at::Tensor has = recorded.select(1, 0) >= 0;
  auto agreeing = [&](const at::Tensor& experts) {
    return ((std::get<0>(recorded.sort(1)) == std::get<0>(experts.sort(1))).all(1) & has).sum().to(at::kDouble);
  };
  at::Tensor used = chosen;
  if (call.replay.defined()) {
    const at::Tensor replay = call.replay.to(chosen.device());
    used = at::where((replay.select(1, 0) >= 0).unsqueeze(1), replay, chosen);
  }
  add_into(call.record->recorded_routes, has.sum().to(at::kDouble));
  add_into(call.record->agreeing_routes, agreeing(used));
  add_into(call.record->router_agreeing_routes, agreeing(chosen));
}

// Whether this use's layer has a router whose tally the forward keeps.
bool tallies_router(const UnitCall& call) {
  return call.kind == UnitCall::Kind::Layer && call.record->tally_routers &&
         call.engine->model().config().layer_is_sparse(static_cast<int64_t>(call.unit) - 1);
}

// The tally's values, kept by the forward's record.
void keep_tally(const UnitCall& call, const RouterTally& tally) {
  call.record->routers.push_back(
      {tally.probability_sum.detach(), tally.choice_counts.detach(), tally.tokens.detach()});
}

// On one rank in float32 a shard is its whole unit already: the engine runs on the
// shards themselves, with nothing to gather, copy or reduce.
bool shards_are_whole(FsdpEngine& engine) {
  return engine.comm().world_size() == 1 && engine.compute_dtype() == at::kFloat;
}

// A unit's master shard in the compute dtype, as the all-gather sends it.
at::Tensor shard_to_send(FsdpEngine& engine, const at::Tensor& shard) {
  return shard.detach().to(engine.compute_dtype()).contiguous();
}

// A flat to gather one unit into: a recorded graph's flat (released after its forward)
// backed by a pool block again, so the graph's views see the unit's weights once more;
// else a new one from the pool.
PooledFlat flat_for(FsdpEngine& engine, const UnitLayout& layout, const at::Tensor& graph_flat,
                    const at::Device device) {
  if (!graph_flat.defined()) return PooledFlat(engine.buffers(), layout.padded_numel, engine.compute_dtype(), device);
  PooledFlat again(engine.buffers(), graph_flat);
  again.reacquire();
  return again;
}

// Starts gathering one unit's weights for the use named by `key` (see take_unit).
void start_unit(FsdpEngine& engine, const GatherKey& key, const UnitLayout& layout, const at::Tensor& shard,
                const at::Tensor& graph_flat) {
  if (shards_are_whole(engine) || engine.overlap().gather_started(key)) return;
  engine.overlap().start_gather(key, flat_for(engine, layout, graph_flat, shard.device()), shard_to_send(engine, shard));
}

// One unit's whole weights for the use named by `key`: the gather started ahead
// (fsdp.prefetch_depth), else gathered now (into the recorded graph's flat when given);
// on one float32 rank the shard itself.
PooledFlat take_unit(FsdpEngine& engine, const GatherKey& key, const UnitLayout& layout, const at::Tensor& shard,
                     const at::Tensor& graph_flat = {}) {
  if (shards_are_whole(engine)) return PooledFlat(shard.detach());
  if (std::optional<PooledFlat> started = engine.overlap().take_gather(key)) return std::move(*started);
  PooledFlat flat = flat_for(engine, layout, graph_flat, shard.device());
  at::Tensor out = flat.tensor();
  engine.comm().all_gather(shard_to_send(engine, shard), out);
  return flat;
}

// A sparse layer's weights that this rank runs (expert parallelism), gathered now (into
// the recorded graph's flat when given): its all-to-all is not prefetched.
PooledFlat take_local_unit(FsdpEngine& engine, size_t unit, const at::Tensor& shard, const at::Tensor& graph_flat) {
  ExpertParallelism& experts = *engine.expert_parallelism();
  PooledFlat flat = flat_for(engine, experts.local_layout(unit), graph_flat, shard.device());
  // Written through a tensor with a version counter of its own: a recorded graph's saved
  // views of this flat must not see the refill as an in-place change.
  at::Tensor out = flat.tensor().variable_data();
  at::Tensor scratch = engine.buffers().acquire(experts.pieces_numel(unit), engine.compute_dtype(), shard.device());
  experts.gather(unit, shard_to_send(engine, shard), out, scratch);
  engine.buffers().release(std::move(scratch));
  return flat;
}

// The base unit's and (with LoRA on for this use) the adapters' gathered weights, for
// the use's forward or its backward (a recorded graph's flats in backward).
struct GatheredUse {
  PooledFlat base, adapter;
  GatheredUse() = default;
  GatheredUse(const UnitCall& call, bool backward) {
    FsdpEngine& engine = *call.engine;
    ShardedModel& model = engine.model();
    const ForwardRecord::Use& use = call.record->uses.at(call.use);
    const bool graph = backward && call.keep_graph;
    const at::Tensor graph_flat = graph ? use.flat : at::Tensor();
    base = call.expert_parallel()
               ? take_local_unit(engine, call.unit, model.shard(call.unit), graph_flat)
               : take_unit(engine, call.key(false, backward), call.base_layout(), model.shard(call.unit), graph_flat);
    if (call.with_adapter)
      adapter = take_unit(engine, call.key(true, backward), call.adapter_layout(), model.adapter_shard(call.unit - 1),
                          graph ? use.adapter_flat : at::Tensor());
  }
  void release() {
    base.release();
    adapter.release();
  }
};

// Starts the gathers of record->uses[i] (forward or backward) unless started already.
void start_use(FsdpEngine& engine, const ForwardRecord& record, size_t i, bool backward) {
  const ForwardRecord::Use& use = record.uses[i];
  ShardedModel& model = engine.model();
  const GatherKey key{record.id, static_cast<int64_t>(i), false, backward};
  if (!runs_local_experts(engine, use.unit))
    start_unit(engine, key, model.units().at(use.unit), model.shard(use.unit), backward ? use.flat : at::Tensor());
  if (use.with_adapter)
    start_unit(engine, GatherKey{record.id, static_cast<int64_t>(i), true, backward},
               model.adapter_units().at(use.unit - 1), model.adapter_shard(use.unit - 1),
               backward ? use.adapter_flat : at::Tensor());
}

// In the backward of use `i`: its own gathers and those of the next `prefetch_depth`
// uses whose backward gathers (the uses before it, in reverse), started in that order.
void start_backward_gathers(FsdpEngine& engine, const ForwardRecord& record, size_t i) {
  if (engine.prefetch_depth() == 0) return;
  start_use(engine, record, i, true);
  size_t ahead = 0;
  for (size_t j = i; j-- > 0 && ahead < engine.prefetch_depth();) {
    if (!record.uses[j].gathers_in_backward) continue;
    start_use(engine, record, j, true);
    ++ahead;
  }
}

// The gradient of a unit's shard: each parameter's gradient written by `fill` into a
// pooled flat buffer in grad_reduce_dtype (fill(i, view) for slot i of `layout`), the
// padding zeroed, reduce-scattered (averaged over ranks) and added to `target`'s
// gradient in float32. With prefetch the reduce-scatter stays in flight while the next
// unit's backward computes; Overlap::finish completes it at the end of the backward.
// `local_unit`: `layout` is that sparse layer's local_layout (expert parallelism), whose
// gradient goes back to the shards by ExpertParallelism::reduce, in place.
void reduce_unit_gradient(FsdpEngine& engine, const UnitLayout& layout, const at::Tensor& target,
                          const std::function<void(size_t, at::Tensor)>& fill,
                          std::optional<size_t> local_unit = std::nullopt) {
  if (engine.comm().world_size() == 1 && !local_unit && !target.grad().defined() &&
      engine.grad_reduce_dtype() == at::kFloat) {
    // A step's first gradient of the shard (zero_grad leaves none) is the flat gradient
    // itself: written in place into the float32 storage kept for it, no block to add.
    at::Tensor grad = engine.kept_gradient(target);
    for (size_t i = 0; i < layout.params.size(); ++i) {
      const ParamSlot& slot = layout.params[i];
      fill(i, grad.narrow(0, slot.offset, slot.numel).view(slot.shape));
    }
    grad.narrow(0, layout.numel, layout.padded_numel - layout.numel).zero_();
    target.mutable_grad() = grad;
    return;
  }
  const at::Device device = engine.model().shard(0).device();
  at::Tensor block = engine.buffers().acquire(layout.padded_numel, engine.grad_reduce_dtype(), device);
  at::Tensor flat = block.narrow(0, 0, layout.padded_numel);
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamSlot& slot = layout.params[i];
    fill(i, flat.narrow(0, slot.offset, slot.numel).view(slot.shape));
  }
  flat.narrow(0, layout.numel, layout.padded_numel - layout.numel).zero_();
  if (local_unit) {
    ExpertParallelism& experts = *engine.expert_parallelism();
    at::Tensor scratch = engine.buffers().acquire(experts.pieces_numel(*local_unit), flat.scalar_type(), device);
    experts.reduce(*local_unit, flat, scratch, target);
    engine.buffers().release(std::move(scratch));
    engine.buffers().release(std::move(block));
    return;
  }
  if (engine.comm().world_size() == 1) {  // the flat gradient is the shard's: no reduction
    // Added into the gradient from a pooled block (a fresh buffer per use would fault in
    // every page again).
    if (target.grad().defined()) target.mutable_grad().add_(flat);
    else target.mutable_grad() = flat.to(at::kFloat, /*non_blocking=*/false, /*copy=*/true);
    engine.buffers().release(std::move(block));
    return;
  }
  if (engine.prefetch_depth() > 0) {
    engine.overlap().start_reduce(engine.buffers(), std::move(block), flat, target,
                                  static_cast<size_t>(engine.prefetch_depth()));
    return;
  }
  at::Tensor shard_grad = at::empty({layout.shard_numel}, flat.options());
  engine.comm().reduce_scatter(flat, shard_grad, ReduceOp::Avg);
  engine.buffers().release(std::move(block));
  accumulate_grad(target, shard_grad.to(at::kFloat));
}

// The shard a use's gradient goes to (the adapters' with LoRA, else the base unit's).
const at::Tensor& trained_shard(const UnitCall& call) {
  ShardedModel& model = call.engine->model();
  return model.has_adapters() ? model.adapter_shard(call.unit - 1) : model.shard(call.unit);
}

// The autograd Function of one unit use. The shards are inputs only so that autograd
// routes their gradients; forward reads them through the call.
//
// Three ways to run, chosen per use at forward time:
// - the embedding: forward gathers, looks up, frees; backward needs no weights (the
//   gradient is the output gradient added into the rows of the input ids);
// - keep_graph (actor.gradient_checkpointing false, and always the head): forward
//   records the graph of the use on views of the gathered weights, then gives the
//   gathered block back to the pool while the views stay; backward gathers into the
//   same storage again and back-propagates through the recorded graph (FSDP2's way);
// - recompute (actor.gradient_checkpointing true): forward runs without a graph and
//   keeps only its input; backward gathers again and re-runs the use with grad.
struct UnitFunction : public torch::autograd::Function<UnitFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& /*shard*/,
                            const at::Tensor& /*adapter_shard*/, const UnitCall& call) {
    call.save(ctx);
    GatheredUse gathered(call, /*backward=*/false);
    if (call.kind == UnitCall::Kind::Embed) {
      const at::Tensor weight =
          use_weights(call, gathered.base.tensor(), {}, false).by_name.at("model.embed_tokens.weight");
      at::Tensor out;
      if (const TensorParallelism* tensor = call.engine->tensor_parallelism()) {
        // The ids in this rank's vocabulary rows (0 for the others; the engine sums the group's).
        out = embed_vocab_rows(tensor->vocab_slice(weight), call.input_ids, tensor->vocab_begin());
      } else {
        out = at::embedding(weight, call.input_ids);
      }
      gathered.release();
      return out;
    }
    RouterTally tally;
    RouterTally* router = tallies_router(call) ? &tally : nullptr;
    at::Tensor chosen;
    at::Tensor* agree = router && call.recorded.defined() ? &chosen : nullptr;
    if (!call.keep_graph) {
      ctx->save_for_backward({x});
      at::Tensor out =
          run_use(call, x, use_weights(call, gathered.base.tensor(), gathered.adapter.tensor(), false), router, agree);
      gathered.release();
      if (router) keep_tally(call, tally);
      if (agree) count_agreement(call, chosen);
      return out;
    }
    UseWeights w = use_weights(call, gathered.base.tensor(), gathered.adapter.tensor(), true);
    at::Tensor x_leaf = x.detach().requires_grad_(true);
    at::Tensor out;
    {
      at::AutoGradMode grad_mode(true);
      out = run_use(call, x_leaf, w, router, agree);
    }
    if (agree) count_agreement(call, chosen);
    gathered.release();  // the views saved by the graph stay, pointing at no memory
    auto& d = ctx->saved_data;
    d["graph_output"] = out;
    d["x_leaf"] = x_leaf;
    d["leaves"] = w.trained;
    if (router) {
      d["router_probability_sum"] = tally.probability_sum;  // with its graph, for the load-balancing loss
      keep_tally(call, tally);
    }
    // The backward gathers into these again (the record lets an earlier backward start it).
    ForwardRecord::Use& use = call.record->uses.at(call.use);
    use.flat = gathered.base.tensor();
    use.adapter_flat = gathered.adapter.defined() ? gathered.adapter.tensor() : at::Tensor();
    return out.detach();  // the graph above stays this use's own, apart from the outer one
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const UnitCall call = UnitCall::load(ctx);
    FsdpEngine& engine = *call.engine;
    const UnitLayout* trained = call.trained_layout();
    // Shard gradients go straight into the shards' .grad (reduce_unit_gradient), not
    // back through autograd: a reduce-scatter may still be in flight when this returns.
    auto result = [&](at::Tensor x_grad) -> variable_list { return {x_grad, {}, {}, {}}; };
    if (engine.prefetch_depth() > 0) engine.finish_overlap_after_backward();

    if (call.kind == UnitCall::Kind::Embed) {
      if (!trained) return result({});
      at::Tensor g = grad_outputs[0].reshape({-1, grad_outputs[0].size(-1)});
      at::Tensor ids = call.input_ids.reshape({-1});
      if (const TensorParallelism* tensor = engine.tensor_parallelism()) {  // this rank's vocabulary rows only
        const at::Tensor mine =
            ((ids >= tensor->vocab_begin()) & (ids < tensor->vocab_begin() + tensor->vocab_rows())).nonzero().view(-1);
        ids = ids.index_select(0, mine);
        g = g.index_select(0, mine);
      }
      reduce_unit_gradient(engine, *trained, trained_shard(call), [&](size_t i, at::Tensor view) {
        view.zero_();
        if (trained->params[i].name == "model.embed_tokens.weight")
          view.index_add_(0, ids, g.to(view.scalar_type()));
      });
      return result({});
    }

    start_backward_gathers(engine, *call.record, call.use);
    GatheredUse gathered(call, /*backward=*/true);
    // A sparse layer of a forward with a load-balancing loss back-propagates that loss's
    // part through its router's probabilities beside the output's gradient.
    const at::Tensor& aux_grad = call.record->router_aux_grad;
    const bool with_aux = aux_grad.defined() && tallies_router(call);
    at::Tensor out, x_leaf, probability_sum;
    std::vector<at::Tensor> leaves;
    if (call.keep_graph) {
      const auto& d = ctx->saved_data;
      out = d.at("graph_output").toTensor();
      x_leaf = d.at("x_leaf").toTensor();
      leaves = d.at("leaves").toTensorVector();
      if (with_aux) probability_sum = d.at("router_probability_sum").toTensor();
    } else {
      UseWeights w = use_weights(call, gathered.base.tensor(), gathered.adapter.tensor(), true);
      leaves = w.trained;
      x_leaf = ctx->get_saved_variables()[0].detach().requires_grad_(true);
      at::AutoGradMode grad_mode(true);
      RouterTally tally;
      out = run_use(call, x_leaf, w, with_aux ? &tally : nullptr);
      probability_sum = tally.probability_sum;
    }

    std::vector<at::Tensor> wrt = leaves;
    wrt.push_back(x_leaf);
    std::vector<at::Tensor> roots = {out}, root_grads = {grad_outputs[0]};
    if (with_aux) {
      roots.push_back(probability_sum);
      root_grads.push_back(aux_grad);
    }
    auto grads = torch::autograd::grad(roots, wrt, root_grads, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    const bool local = trained && !engine.model().has_adapters() && call.expert_parallel();
    if (trained)
      reduce_unit_gradient(
          engine, *trained, trained_shard(call),
          [&](size_t i, at::Tensor view) {
            // Tensor parallelism: a whole weight's gradient counts on the group's first rank.
            const TensorParallelism* tensor = engine.tensor_parallelism();
            if (grads[i].defined() && (!tensor || tensor->counts_gradient(trained->params[i].name)))
              view.copy_(grads[i]);
            else
              view.zero_();
          },
          local ? std::optional<size_t>(call.unit) : std::nullopt);
    gathered.release();
    // The recorded graph's activations go now, not when the whole backward ends.
    for (const char* key : {"graph_output", "x_leaf", "leaves", "router_probability_sum"}) ctx->saved_data.erase(key);
    ForwardRecord::Use& use = call.record->uses.at(call.use);
    use.flat = use.adapter_flat = at::Tensor();
    return result(grads.back());
  }
};

}  // namespace

at::Tensor FsdpEngine::kept_gradient(const at::Tensor& shard) {
  at::Tensor& kept = kept_gradients_[shard.unsafeGetTensorImpl()];
  if (!kept.defined()) kept = at::empty(shard.sizes(), shard.options().dtype(at::kFloat));
  return kept;
}

std::unique_ptr<FsdpEngine> make_engine(const Config& cfg, ShardedModel& model, Communicator& comm) {
  auto engine = std::make_unique<FsdpEngine>(model, comm, dtype_from_name(cfg.actor.dtype),
                                             dtype_from_name(cfg.actor.grad_reduce_dtype));
  engine->set_gradient_checkpointing(cfg.actor.gradient_checkpointing);
  engine->set_prefetch_depth(cfg.fsdp.prefetch_depth);
  const EngineShape mesh = parse_allocation(cfg).actor;  // e: experts' groups, c: sequences' groups
  engine->set_expert_parallel(static_cast<int>(mesh.expert));
  engine->set_tensor_parallel(static_cast<int>(mesh.tensor));  // before c: a context group spans tensor groups
  engine->set_context_parallel(static_cast<int>(mesh.context));
  return engine;
}

FsdpModel make_fsdp_engine(const Config& cfg, const RankInfo& me, Communicator& comm) {
  FsdpModel result;
  result.init = staged_init(cfg, me, comm);
  result.engine = make_engine(cfg, *result.init.model, comm);
  return result;
}

FsdpEngine::FsdpEngine(ShardedModel& model, Communicator& comm, at::ScalarType compute_dtype,
                       at::ScalarType grad_reduce_dtype)
    : model_(model),
      comm_(comm),
      compute_dtype_(compute_dtype),
      grad_reduce_dtype_(grad_reduce_dtype),
      buffers_(std::make_unique<BufferPool>()),
      overlap_(std::make_unique<Overlap>(comm)) {
  for (at::Tensor& shard : model_.trainable_shards()) shard.requires_grad_(true);
}

void FsdpEngine::set_expert_parallel(int degree) {
  experts_.reset();
  if (degree > 1) experts_ = std::make_shared<ExpertParallelism>(comm_, model_.config(), model_.units(), degree);
}

void FsdpEngine::set_tensor_parallel(int degree) {
  tensor_.reset();
  if (degree > 1) tensor_ = std::make_shared<TensorParallelism>(comm_, model_.config(), degree);
}

void FsdpEngine::set_context_parallel(int degree) {
  context_.reset();
  if (degree > 1)
    context_ = tensor_ ? std::make_shared<ContextParallelism>(comm_, tensor_->local_config(), degree, tensor_->degree())
                       : std::make_shared<ContextParallelism>(comm_, model_.config(), degree);
}

FsdpEngine::~FsdpEngine() {
  if (overlap_) overlap_->finish(*buffers_);
}

at::Tensor FsdpEngine::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask, RouterLoss router,
                               const at::Tensor& head_rows) {
  return forward(input_ids, attention_inputs(model_.config(), input_ids, attention_mask, nullptr, compute_dtype_),
                 router, head_rows);
}

at::Tensor FsdpEngine::forward(const at::Tensor& input_ids, const AttentionInputs& attention, RouterLoss router,
                               const at::Tensor& head_rows) {
  using Kind = UnitCall::Kind;
  if (overlap_finish_queued_) finish_overlap();  // a backward that failed before its end
  const size_t layers = static_cast<size_t>(model_.config().num_hidden_layers);
  // The final norm and head have a unit of their own after the layers, unless the head
  // is tied to the embedding (then the root unit holds all three).
  const size_t head_unit = model_.units().size() > layers + 1 ? layers + 1 : 0;
  auto record = c10::make_intrusive<ForwardRecord>();
  record->id = next_forward_id_++;
  record->tally_routers =
      model_.config().num_experts > 0 && at::GradMode::is_enabled() && (router.tally || router.weight != 0);
  record->router_aux_weight = router.weight;
  for (size_t u = 0; u <= layers + 1; ++u) {
    const Kind kind = u == 0 ? Kind::Embed : u <= layers ? Kind::Layer : Kind::Head;
    ForwardRecord::Use use;
    use.unit = u <= layers ? u : head_unit;
    use.with_adapter = kind == Kind::Layer && adapters_enabled();
    record->uses.push_back(use);
  }
  // A sparse layer's recorded experts [B x T, k] (int64), to replay or to agree with.
  const ModelConfig& config = model_.config();
  std::vector<at::Tensor> layer_experts(layers);
  if (router.experts.defined() && config.num_experts > 0 && (router.replay || record->tally_routers)) {
    const int64_t k = config.num_experts_per_tok;
    if (router.experts.dim() != 3 || router.experts.size(0) != input_ids.size(0) ||
        router.experts.size(1) != input_ids.size(1) || router.experts.size(2) != config.sparse_layer_count() * k)
      throw std::invalid_argument(cat("FsdpEngine::forward: recorded experts of shape ", router.experts.sizes(),
                                      " for ids ", input_ids.sizes(), " and ", config.sparse_layer_count(),
                                      " sparse layers of top-", k));
    const at::Tensor all = router.experts.to(input_ids.device(), at::kLong);
    for (size_t l = 0, s = 0; l < layers; ++l)
      if (config.layer_is_sparse(static_cast<int64_t>(l)))
        layer_experts[l] = all.narrow(2, static_cast<int64_t>(s++) * k, k).reshape({-1, k});
  }
  auto apply = [&](size_t i, Kind kind, at::Tensor ids, AttentionInputs attention, const at::Tensor& x,
                   at::Tensor rows = {}) {
    // The gathers of this use and of the next prefetch_depth ones run ahead (forward).
    for (size_t j = i; prefetch_depth_ > 0 && j < record->uses.size() && j <= i + prefetch_depth_; ++j)
      start_use(*this, *record, j, false);
    ForwardRecord::Use& use = record->uses[i];
    // Custom Functions take no undefined inputs: an empty tensor stands for "no adapter".
    at::Tensor adapter = use.with_adapter ? model_.adapter_shard(use.unit - 1) : at::empty({0});
    const at::Tensor& shard = model_.shard(use.unit);
    const bool needs_grad = at::GradMode::is_enabled() &&
                            (x.requires_grad() || shard.requires_grad() || adapter.requires_grad());
    // The head is never recomputed (it is the last use: its graph lives only until the
    // backward starts); the layers only with gradient checkpointing.
    const bool keep_graph = needs_grad && kind != Kind::Embed && (kind == Kind::Head || !gradient_checkpointing_);
    use.gathers_in_backward = needs_grad && kind != Kind::Embed;
    UnitCall call{this, use.unit, kind, std::move(ids), std::move(attention), std::move(rows)};
    call.with_adapter = use.with_adapter;
    call.keep_graph = keep_graph;
    call.record = record;
    call.use = i;
    if (kind == Kind::Layer && layer_experts[i - 1].defined()) {
      if (router.replay) call.replay = layer_experts[i - 1];
      if (record->tally_routers) call.recorded = layer_experts[i - 1];
    }
    return UnitFunction::apply(x, shard, adapter, call);
  };
  // Gemma's embedding scale outside the unit: autograd carries it into the unit's backward.
  at::Tensor embedded = apply(0, Kind::Embed, input_ids, {}, input_ids);
  if (tensor_) embedded = tensor_->sum(embedded);  // each rank looked up the ids of its rows
  at::Tensor h = scale_embeddings(model().config(), embedded);
  for (size_t u = 1; u <= layers; ++u) h = apply(u, Kind::Layer, {}, attention, h);
  at::Tensor logits = apply(layers + 1, Kind::Head, {}, {}, h, head_rows);
  if (!record->routers.empty()) finish_router_tallies(*record);
  return logits;
}

void FsdpEngine::finish_router_tallies(ForwardRecord& record) {
  const ModelConfig& c = model_.config();
  std::vector<at::Tensor> counts;
  at::Tensor tokens = at::zeros({}, record.routers[0].tokens.options());
  for (const RouterTally& t : record.routers) {
    counts.push_back(t.choice_counts);
    tokens = tokens + t.tokens;
  }
  const at::Tensor per_layer = at::stack(counts).to(at::kDouble);
  if (record.router_aux_weight != 0)
    record.router_aux_grad =
        per_layer.sum(0).to(at::kFloat) * (record.router_aux_weight * static_cast<double>(c.num_experts)) /
        (tokens * tokens).clamp_min(1);
  const at::Tensor aux = load_balancing_loss(c, record.routers).to(at::kDouble);
  RouterStats& s = router_stats_;
  s.aux_loss_sum = s.forwards == 0 ? aux : s.aux_loss_sum + aux;
  s.expert_tokens = s.forwards == 0 ? per_layer : s.expert_tokens + per_layer;
  if (record.recorded_routes.defined()) {
    add_into(s.recorded_routes, record.recorded_routes);
    add_into(s.agreeing_routes, record.agreeing_routes);
    add_into(s.router_agreeing_routes, record.router_agreeing_routes);
  }
  ++s.forwards;
}

RouterStats FsdpEngine::take_router_stats() { return std::exchange(router_stats_, RouterStats{}); }

void FsdpEngine::finish_overlap_after_backward() {
  if (overlap_finish_queued_) return;
  overlap_finish_queued_ = true;
  torch::autograd::Engine::get_default_engine().queue_callback([this] { finish_overlap(); });
}

void FsdpEngine::finish_overlap() {
  overlap_finish_queued_ = false;
  overlap_->finish(*buffers_);
}

}  // namespace areal
