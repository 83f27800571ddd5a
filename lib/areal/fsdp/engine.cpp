#include "areal/fsdp/engine.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "areal/model/functional.h"
#include "areal/util/strings.h"

namespace areal {

// What one use of a unit computes, given its gathered weights.
struct UnitCall {
  enum class Kind { Embed, Layer, Head };
  FsdpEngine* engine;
  size_t unit;
  Kind kind;
  at::Tensor input_ids;        // Embed
  AttentionInputs attention;   // Layer

  bool has_adapter() const { return kind == Kind::Layer && engine->adapters_enabled(); }

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

// The autograd Function of one unit use. The UnitCall travels as an address in
// saved_data: the engine keeps it alive until the next forward. The shards are inputs
// only so that autograd routes their gradients; forward reads them through the call.
struct UnitFunction : public torch::autograd::Function<UnitFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& /*shard*/,
                            const at::Tensor& /*adapter_shard*/, int64_t call_address) {
    const auto* call = reinterpret_cast<const UnitCall*>(call_address);
    ctx->saved_data["call"] = call_address;
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
    const auto* call = reinterpret_cast<const UnitCall*>(ctx->saved_data["call"].toInt());
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
  calls_.clear();
  using Kind = UnitCall::Kind;
  auto apply = [&](UnitCall call, const at::Tensor& x) {
    calls_.push_back(std::move(call));
    const UnitCall& c = calls_.back();
    // Custom Functions take no undefined inputs: an empty tensor stands for "no adapter".
    at::Tensor adapter = c.has_adapter() ? model_.adapter_shard(c.unit - 1) : at::empty({0});
    return UnitFunction::apply(x, model_.shard(c.unit), adapter, reinterpret_cast<int64_t>(&c));
  };
  at::Tensor h = apply({this, 0, Kind::Embed, input_ids, {}}, input_ids);
  AttentionInputs attention = attention_inputs(model_.config(), input_ids, attention_mask, nullptr, compute_dtype_);
  for (size_t u = 1; u < model_.units().size(); ++u) h = apply({this, u, Kind::Layer, {}, attention}, h);
  return apply({this, 0, Kind::Head, {}, {}}, h);
}

}  // namespace areal
