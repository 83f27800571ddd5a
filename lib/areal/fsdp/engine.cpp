#include "areal/fsdp/engine.h"
#include "areal/fsdp/policy.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <functional>
#include <optional>

#include "areal/fsdp/buffer_pool.h"
#include "areal/model/functional.h"
#include "areal/util/strings.h"

namespace areal {

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
  bool with_adapter = false;   // LoRA on, as it was when the forward ran
  bool keep_graph = false;     // forward records the graph; backward does not recompute

  void save(torch::autograd::AutogradContext* ctx) const {
    auto& d = ctx->saved_data;
    d["engine"] = reinterpret_cast<int64_t>(engine);
    d["unit"] = static_cast<int64_t>(unit);
    d["kind"] = static_cast<int64_t>(kind);
    d["with_adapter"] = with_adapter;
    d["keep_graph"] = keep_graph;
    d["input_ids"] = input_ids;
    d["cos"] = attention.cos;
    d["sin"] = attention.sin;
    d["mask"] = attention.mask;
    d["sequence_starts"] = attention.sequence_starts;
  }
  static UnitCall load(torch::autograd::AutogradContext* ctx) {
    const auto& d = ctx->saved_data;
    UnitCall call;
    call.engine = reinterpret_cast<FsdpEngine*>(d.at("engine").toInt());
    call.unit = static_cast<size_t>(d.at("unit").toInt());
    call.kind = static_cast<Kind>(d.at("kind").toInt());
    call.with_adapter = d.at("with_adapter").toBool();
    call.keep_graph = d.at("keep_graph").toBool();
    call.input_ids = d.at("input_ids").toTensor();
    call.attention.cos = d.at("cos").toTensor();
    call.attention.sin = d.at("sin").toTensor();
    call.attention.mask = d.at("mask").toTensor();
    call.attention.sequence_starts = d.at("sequence_starts").toTensor();
    return call;
  }

  const UnitLayout& base_layout() const { return engine->model().units().at(unit); }
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

// Runs a layer or the head on `x` with the weights of one use.
at::Tensor run_use(const UnitCall& call, const at::Tensor& x, const UseWeights& w) {
  ShardedModel& model = call.engine->model();
  const ModelConfig& config = model.config();
  if (call.kind == UnitCall::Kind::Head) {
    auto head = w.by_name.find("lm_head.weight");
    return lm_logits(config, w.by_name.at("model.norm.weight"),
                     head != w.by_name.end() ? head->second : w.by_name.at("model.embed_tokens.weight"), x);
  }
  const std::string prefix = cat("model.layers.", call.unit - 1, ".");
  auto lookup = [&](const std::string& name) {
    auto it = w.by_name.find(prefix + name);
    return it == w.by_name.end() ? at::Tensor() : it->second;
  };
  at::Tensor keys, values;  // no cache in training
  return decoder_layer(config, lookup, x, call.attention, keys, values, model.adapter_scale());
}

// On one rank in float32 a shard is its whole unit already: the engine runs on the
// shards themselves, with nothing to gather, copy or reduce.
bool shards_are_whole(FsdpEngine& engine) {
  return engine.comm().world_size() == 1 && engine.compute_dtype() == at::kFloat;
}

// All-gathers a unit (its master shard cast to the compute dtype) into `flat`.
void gather_into(FsdpEngine& engine, const at::Tensor& shard, const at::Tensor& flat) {
  at::Tensor out = flat;
  engine.comm().all_gather(shard.detach().to(engine.compute_dtype()).contiguous(), out);
}

// One unit's whole weights, pooled and gathered (or the shard itself, see above).
PooledFlat whole_unit(FsdpEngine& engine, const UnitLayout& layout, const at::Tensor& shard) {
  if (shards_are_whole(engine)) return PooledFlat(shard.detach());
  PooledFlat flat(engine.buffers(), layout.padded_numel, engine.compute_dtype(), shard.device());
  gather_into(engine, shard, flat.tensor());
  return flat;
}

// A recorded graph's flat (released after its forward) backed by a pool block again and
// gathered into, so the graph's views see the unit's weights once more.
PooledFlat regather(FsdpEngine& engine, const at::Tensor& flat, const at::Tensor& shard) {
  PooledFlat again(engine.buffers(), flat);
  again.reacquire();
  gather_into(engine, shard, again.tensor());
  return again;
}

// The base unit's and (with LoRA on for this use) the adapters' gathered weights.
struct GatheredUse {
  PooledFlat base, adapter;
  explicit GatheredUse(const UnitCall& call) {
    ShardedModel& model = call.engine->model();
    base = whole_unit(*call.engine, call.base_layout(), model.shard(call.unit));
    if (call.with_adapter) adapter = whole_unit(*call.engine, call.adapter_layout(), model.adapter_shard(call.unit - 1));
  }
  void release() {
    base.release();
    adapter.release();
  }
};

// The gradient of a unit's shard: each parameter's gradient written by `fill` into a
// pooled flat buffer in grad_reduce_dtype (fill(i, view) for slot i of `layout`), the
// padding zeroed, reduce-scattered (averaged over ranks), in float32.
at::Tensor reduce_unit_gradient(FsdpEngine& engine, const UnitLayout& layout,
                                const std::function<void(size_t, at::Tensor)>& fill) {
  const at::Device device = engine.model().shard(0).device();
  const bool alone = engine.comm().world_size() == 1;  // the flat gradient is the shard's: no reduction
  at::Tensor block = alone ? at::empty({layout.padded_numel}, at::TensorOptions(device).dtype(engine.grad_reduce_dtype()))
                           : engine.buffers().acquire(layout.padded_numel, engine.grad_reduce_dtype(), device);
  at::Tensor flat = block.narrow(0, 0, layout.padded_numel);
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamSlot& slot = layout.params[i];
    fill(i, flat.narrow(0, slot.offset, slot.numel).view(slot.shape));
  }
  flat.narrow(0, layout.numel, layout.padded_numel - layout.numel).zero_();
  if (alone) return flat.to(at::kFloat);
  at::Tensor shard_grad = at::empty({layout.shard_numel}, flat.options());
  engine.comm().reduce_scatter(flat, shard_grad, ReduceOp::Avg);
  engine.buffers().release(std::move(block));
  return shard_grad.to(at::kFloat);
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
    GatheredUse gathered(call);
    if (call.kind == UnitCall::Kind::Embed) {
      at::Tensor out = at::embedding(use_weights(call, gathered.base.tensor(), {}, false).by_name.at(
                                         "model.embed_tokens.weight"),
                                     call.input_ids);
      gathered.release();
      return out;
    }
    if (!call.keep_graph) {
      ctx->save_for_backward({x});
      at::Tensor out = run_use(call, x, use_weights(call, gathered.base.tensor(), gathered.adapter.tensor(), false));
      gathered.release();
      return out;
    }
    UseWeights w = use_weights(call, gathered.base.tensor(), gathered.adapter.tensor(), true);
    at::Tensor x_leaf = x.detach().requires_grad_(true);
    at::Tensor out;
    {
      at::AutoGradMode grad_mode(true);
      out = run_use(call, x_leaf, w);
    }
    gathered.release();  // the views saved by the graph stay, pointing at no memory
    auto& d = ctx->saved_data;
    d["graph_output"] = out;
    d["x_leaf"] = x_leaf;
    d["leaves"] = w.trained;
    d["flat"] = gathered.base.tensor();
    d["adapter_flat"] = gathered.adapter.defined() ? gathered.adapter.tensor() : at::Tensor();
    return out.detach();  // the graph above stays this use's own, apart from the outer one
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const UnitCall call = UnitCall::load(ctx);
    FsdpEngine& engine = *call.engine;
    const bool lora = engine.model().has_adapters();
    const UnitLayout* trained = call.trained_layout();
    auto result = [&](at::Tensor x_grad, at::Tensor shard_grad) -> variable_list {
      return {x_grad, lora ? at::Tensor() : shard_grad, lora ? shard_grad : at::Tensor(), at::Tensor()};
    };

    if (call.kind == UnitCall::Kind::Embed) {
      if (!trained) return result({}, {});
      const at::Tensor& g = grad_outputs[0];
      at::Tensor ids = call.input_ids.reshape({-1});
      return result({}, reduce_unit_gradient(engine, *trained, [&](size_t i, at::Tensor view) {
                      view.zero_();
                      if (trained->params[i].name == "model.embed_tokens.weight")
                        view.index_add_(0, ids, g.reshape({-1, g.size(-1)}).to(view.scalar_type()));
                    }));
    }

    at::Tensor out, x_leaf;
    std::vector<at::Tensor> leaves;
    std::optional<GatheredUse> gathered;  // recompute: gathered here
    PooledFlat base, adapter;             // keep_graph: the recorded graph's storage, filled again
    if (call.keep_graph) {
      const auto& d = ctx->saved_data;
      out = d.at("graph_output").toTensor();
      x_leaf = d.at("x_leaf").toTensor();
      leaves = d.at("leaves").toTensorVector();
      if (!shards_are_whole(engine)) {  // else the graph's views are the shards themselves
        base = regather(engine, d.at("flat").toTensor(), engine.model().shard(call.unit));
        if (call.with_adapter)
          adapter = regather(engine, d.at("adapter_flat").toTensor(), engine.model().adapter_shard(call.unit - 1));
      }
    } else {
      gathered.emplace(call);
      UseWeights w = use_weights(call, gathered->base.tensor(), gathered->adapter.tensor(), true);
      leaves = w.trained;
      x_leaf = ctx->get_saved_variables()[0].detach().requires_grad_(true);
      at::AutoGradMode grad_mode(true);
      out = run_use(call, x_leaf, w);
    }

    std::vector<at::Tensor> wrt = leaves;
    wrt.push_back(x_leaf);
    auto grads = torch::autograd::grad({out}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);
    at::Tensor shard_grad;
    if (trained)
      shard_grad = reduce_unit_gradient(engine, *trained, [&](size_t i, at::Tensor view) {
        if (grads[i].defined()) view.copy_(grads[i]);
        else view.zero_();
      });
    if (gathered) gathered->release();
    base.release();
    adapter.release();
    // The recorded graph's activations go now, not when the whole backward ends.
    for (const char* key : {"graph_output", "x_leaf", "leaves", "flat", "adapter_flat"}) ctx->saved_data.erase(key);
    return result(grads.back(), shard_grad);
  }
};

}  // namespace

FsdpModel make_fsdp_engine(const Config& cfg, const RankInfo& me, Communicator& comm) {
  FsdpModel result;
  result.init = staged_init(cfg, me, comm);
  result.engine = std::make_unique<FsdpEngine>(*result.init.model, comm, dtype_from_name(cfg.actor.dtype),
                                               dtype_from_name(cfg.actor.grad_reduce_dtype));
  result.engine->set_gradient_checkpointing(cfg.actor.gradient_checkpointing);
  return result;
}

FsdpEngine::FsdpEngine(ShardedModel& model, Communicator& comm, at::ScalarType compute_dtype,
                       at::ScalarType grad_reduce_dtype)
    : model_(model),
      comm_(comm),
      compute_dtype_(compute_dtype),
      grad_reduce_dtype_(grad_reduce_dtype),
      buffers_(std::make_unique<BufferPool>()) {
  for (at::Tensor& shard : model_.trainable_shards()) shard.requires_grad_(true);
}

FsdpEngine::~FsdpEngine() = default;

at::Tensor FsdpEngine::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  return forward(input_ids, attention_inputs(model_.config(), input_ids, attention_mask, nullptr, compute_dtype_));
}

at::Tensor FsdpEngine::forward(const at::Tensor& input_ids, const AttentionInputs& attention) {
  using Kind = UnitCall::Kind;
  const size_t layers = static_cast<size_t>(model_.config().num_hidden_layers);
  // The final norm and head have a unit of their own after the layers, unless the head
  // is tied to the embedding (then the root unit holds all three).
  const size_t head_unit = model_.units().size() > layers + 1 ? layers + 1 : 0;
  auto apply = [&](size_t unit, Kind kind, at::Tensor ids, AttentionInputs attention, const at::Tensor& x) {
    const bool with_adapter = kind == Kind::Layer && adapters_enabled();
    // Custom Functions take no undefined inputs: an empty tensor stands for "no adapter".
    at::Tensor adapter = with_adapter ? model_.adapter_shard(unit - 1) : at::empty({0});
    const at::Tensor& shard = model_.shard(unit);
    const bool needs_grad = at::GradMode::is_enabled() &&
                            (x.requires_grad() || shard.requires_grad() || adapter.requires_grad());
    // The head is never recomputed (it is the last use: its graph lives only until the
    // backward starts); the layers only with gradient checkpointing.
    const bool keep_graph = needs_grad && kind != Kind::Embed && (kind == Kind::Head || !gradient_checkpointing_);
    const UnitCall call{this, unit, kind, std::move(ids), std::move(attention), with_adapter, keep_graph};
    return UnitFunction::apply(x, shard, adapter, call);
  };
  at::Tensor h = apply(0, Kind::Embed, input_ids, {}, input_ids);
  for (size_t u = 1; u <= layers; ++u) h = apply(u, Kind::Layer, {}, attention, h);
  return apply(head_unit, Kind::Head, {}, {}, h);
}

}  // namespace areal
