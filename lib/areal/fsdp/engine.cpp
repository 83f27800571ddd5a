#include "areal/fsdp/engine.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "areal/model/functional.h"
#include "areal/util/strings.h"

namespace areal {

// What one use of a unit computes, given its gathered weights. Everything a use needs
// in its backward is here, fixed at forward time, and travels in the autograd
// context's saved data (save/load), so each forward's graph owns its own: a second
// forward before the backward of the first, or a toggle of the adapters in between,
// changes nothing of the first.
struct UnitCall {
  enum class Kind : int64_t { Embed, Layer, Head };
  FsdpEngine* engine = nullptr;  // outlives the graphs of its forwards
  size_t unit = 0;
  Kind kind = Kind::Layer;
  at::Tensor input_ids;        // Embed
  AttentionInputs attention;   // Layer
  bool with_adapter = false;   // LoRA on, as it was when the forward ran

  bool has_adapter() const { return with_adapter; }

  void save(torch::autograd::AutogradContext* ctx) const {
    auto& d = ctx->saved_data;
    d["engine"] = reinterpret_cast<int64_t>(engine);
    d["unit"] = static_cast<int64_t>(unit);
    d["kind"] = static_cast<int64_t>(kind);
    d["with_adapter"] = with_adapter;
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
    call.input_ids = d.at("input_ids").toTensor();
    call.attention = {d.at("cos").toTensor(), d.at("sin").toTensor(), d.at("mask").toTensor(),
                      d.at("sequence_starts").toTensor()};
    return call;
  }

  // Runs the unit on `x` with the weights in `flat` (its gathered buffer) and, with
  // LoRA, the layer's adapters in `adapter_flat`.
  at::Tensor run(const at::Tensor& x, const at::Tensor& flat, const at::Tensor& adapter_flat) const {
    ShardedModel& model = engine->model();
    std::map<std::string, at::Tensor> weights;
    for (auto& [name, view] : model.unit_views(unit, flat)) weights[name] = view;
    if (adapter_flat.defined())
      for (auto& [name, view] : model.adapter_views(unit - 1, adapter_flat)) weights[name] = view;
    const ModelConfig& config = model.config();
    switch (kind) {
      case Kind::Embed:
        return at::embedding(weights.at("model.embed_tokens.weight"), input_ids);
      case Kind::Head: {
        auto head = weights.find("lm_head.weight");
        return lm_logits(config, weights.at("model.norm.weight"),
                         head != weights.end() ? head->second : weights.at("model.embed_tokens.weight"), x);
      }
      case Kind::Layer: {
        const std::string prefix = cat("model.layers.", unit - 1, ".");
        auto lookup = [&](const std::string& name) {
          auto it = weights.find(prefix + name);
          return it == weights.end() ? at::Tensor() : it->second;
        };
        at::Tensor keys, values;  // no cache in training
        return decoder_layer(config, lookup, x, attention, keys, values, model.adapter_scale());
      }
    }
    return {};
  }
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The autograd Function of one unit use. The UnitCall travels in saved_data, so it
// lives exactly as long as this use's graph. The shards are inputs only so that
// autograd routes their gradients; forward reads them through the call.
struct UnitFunction : public torch::autograd::Function<UnitFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& /*shard*/,
                            const at::Tensor& /*adapter_shard*/, const UnitCall& call_value) {
    call_value.save(ctx);
    const UnitCall* call = &call_value;
    ctx->save_for_backward({x});
    FsdpEngine& engine = *call->engine;
    at::NoGradGuard no_grad;
    at::Tensor flat = engine.model().gather_unit(call->unit, engine.comm(), engine.compute_dtype());
    at::Tensor adapter_flat = call->has_adapter()
                                  ? engine.model().gather_adapter(call->unit - 1, engine.comm(), engine.compute_dtype())
                                  : at::Tensor();
    return call->run(x, flat, adapter_flat);  // the gathered buffers are freed when this returns
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const UnitCall loaded = UnitCall::load(ctx);
    const UnitCall* call = &loaded;
    FsdpEngine& engine = *call->engine;
    const at::Tensor x = ctx->get_saved_variables()[0];

    // Gather again and re-run with grad; the gradient of a flat buffer comes out of
    // autograd because the weights are views of it. With LoRA only the adapters' buffer
    // gets a gradient: the base is frozen.
    ShardedModel& model = engine.model();
    const bool lora = model.has_adapters();
    at::Tensor flat = model.gather_unit(call->unit, engine.comm(), engine.compute_dtype());
    at::Tensor adapter_flat =
        call->has_adapter() ? model.gather_adapter(call->unit - 1, engine.comm(), engine.compute_dtype()) : at::Tensor();
    at::Tensor trained = lora ? adapter_flat : flat;  // undefined: a LoRA root unit trains nothing
    if (trained.defined()) trained.requires_grad_(true);
    const bool x_needs_grad = x.defined() && x.is_floating_point();
    at::Tensor x_leaf = x_needs_grad ? x.detach().requires_grad_(true) : x;
    at::Tensor out;
    {
      at::AutoGradMode grad_mode(true);
      out = call->run(x_leaf, flat, adapter_flat);
    }
    std::vector<at::Tensor> wrt;
    if (trained.defined()) wrt.push_back(trained);
    if (x_needs_grad) wrt.push_back(x_leaf);
    auto grads = torch::autograd::grad({out}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);

    at::Tensor shard_grad;
    if (trained.defined()) {
      at::Tensor flat_grad = grads[0].defined() ? grads[0] : at::zeros_like(trained);
      at::Tensor to_reduce = flat_grad.to(engine.grad_reduce_dtype()).contiguous();
      shard_grad = at::empty({to_reduce.numel() / engine.comm().world_size()}, to_reduce.options());
      engine.comm().reduce_scatter(to_reduce, shard_grad, ReduceOp::Avg);
      shard_grad = shard_grad.to(at::kFloat);
    }
    at::Tensor x_grad = x_needs_grad ? grads.back() : at::Tensor();
    return {x_grad, lora ? at::Tensor() : shard_grad, lora ? shard_grad : at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::ScalarType dtype_from_name(const std::string& name) {
  if (name == "bfloat16") return at::kBFloat16;
  if (name == "float16") return at::kHalf;
  if (name == "float32") return at::kFloat;
  throw std::invalid_argument("unknown dtype name '" + name + "' (bfloat16, float16, float32)");
}

FsdpModel make_fsdp_engine(const Config& cfg, const RankInfo& me, Communicator& comm) {
  FsdpModel result;
  result.init = staged_init(cfg, me, comm);
  result.engine = std::make_unique<FsdpEngine>(*result.init.model, comm, dtype_from_name(cfg.actor.dtype),
                                               dtype_from_name(cfg.actor.grad_reduce_dtype));
  return result;
}

FsdpEngine::FsdpEngine(ShardedModel& model, Communicator& comm, at::ScalarType compute_dtype,
                       at::ScalarType grad_reduce_dtype)
    : model_(model), comm_(comm), compute_dtype_(compute_dtype), grad_reduce_dtype_(grad_reduce_dtype) {
  for (at::Tensor& shard : model_.trainable_shards()) shard.requires_grad_(true);
}

FsdpEngine::~FsdpEngine() = default;

at::Tensor FsdpEngine::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  return forward(input_ids, attention_inputs(model_.config(), input_ids, attention_mask, nullptr, compute_dtype_));
}

at::Tensor FsdpEngine::forward(const at::Tensor& input_ids, const AttentionInputs& attention) {
  using Kind = UnitCall::Kind;
  auto apply = [&](size_t unit, Kind kind, at::Tensor ids, AttentionInputs attention, const at::Tensor& x) {
    const UnitCall call{this, unit, kind, std::move(ids), std::move(attention),
                        kind == Kind::Layer && adapters_enabled()};
    // Custom Functions take no undefined inputs: an empty tensor stands for "no adapter".
    at::Tensor adapter = call.has_adapter() ? model_.adapter_shard(unit - 1) : at::empty({0});
    return UnitFunction::apply(x, model_.shard(unit), adapter, call);
  };
  at::Tensor h = apply(0, Kind::Embed, input_ids, {}, input_ids);
  for (size_t u = 1; u < model_.units().size(); ++u) h = apply(u, Kind::Layer, {}, attention, h);
  return apply(0, Kind::Head, {}, {}, h);
}

}  // namespace areal
