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

  // Runs the unit on `x` with the weights in `flat` (its gathered buffer).
  at::Tensor run(const at::Tensor& x, const at::Tensor& flat) const {
    ShardedModel& model = engine->model();
    std::map<std::string, at::Tensor> weights;
    for (auto& [name, view] : model.unit_views(unit, flat)) weights[name] = view;
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
        return decoder_layer(config, lookup, x, attention, keys, values);
      }
    }
    return {};
  }
};

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The autograd Function of one unit use. The UnitCall travels as an address in
// saved_data: the engine keeps it alive until the next forward.
struct UnitFunction : public torch::autograd::Function<UnitFunction> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, const at::Tensor& shard, int64_t call_address) {
    const auto* call = reinterpret_cast<const UnitCall*>(call_address);
    ctx->saved_data["call"] = call_address;
    ctx->save_for_backward({x});
    FsdpEngine& engine = *call->engine;
    at::NoGradGuard no_grad;
    at::Tensor flat = engine.model().gather_unit(call->unit, engine.comm(), engine.compute_dtype());
    return call->run(x, flat);  // `flat` is freed when this returns
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto* call = reinterpret_cast<const UnitCall*>(ctx->saved_data["call"].toInt());
    FsdpEngine& engine = *call->engine;
    const at::Tensor x = ctx->get_saved_variables()[0];
    const UnitLayout& layout = engine.model().units()[call->unit];

    // Gather again and re-run with grad; the gradient of the flat buffer comes out
    // of autograd because the weights are views of it.
    at::Tensor flat = engine.model().gather_unit(call->unit, engine.comm(), engine.compute_dtype()).requires_grad_(true);
    const bool x_needs_grad = x.defined() && x.is_floating_point();
    at::Tensor x_leaf = x_needs_grad ? x.detach().requires_grad_(true) : x;
    at::Tensor out;
    {
      at::AutoGradMode grad_mode(true);
      out = call->run(x_leaf, flat);
    }
    std::vector<at::Tensor> wrt = {flat};
    if (x_needs_grad) wrt.push_back(x_leaf);
    auto grads = torch::autograd::grad({out}, wrt, {grad_outputs[0]}, /*retain_graph=*/false,
                                       /*create_graph=*/false, /*allow_unused=*/true);

    at::Tensor flat_grad = grads[0].defined() ? grads[0] : at::zeros_like(flat);
    at::Tensor to_reduce = flat_grad.to(engine.grad_reduce_dtype()).contiguous();
    at::Tensor shard_grad = at::empty({layout.shard_numel}, to_reduce.options());
    engine.comm().reduce_scatter(to_reduce, shard_grad, ReduceOp::Avg);
    return {x_needs_grad ? grads[1] : at::Tensor(), shard_grad.to(at::kFloat), at::Tensor()};
  }
};

}  // namespace

FsdpEngine::FsdpEngine(ShardedModel& model, Communicator& comm, at::ScalarType compute_dtype,
                       at::ScalarType grad_reduce_dtype)
    : model_(model), comm_(comm), compute_dtype_(compute_dtype), grad_reduce_dtype_(grad_reduce_dtype) {
  for (size_t u = 0; u < model_.units().size(); ++u) model_.shard(u).requires_grad_(true);
}

FsdpEngine::~FsdpEngine() = default;

at::Tensor FsdpEngine::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask) {
  calls_.clear();
  using Kind = UnitCall::Kind;
  auto apply = [&](UnitCall call, const at::Tensor& x) {
    calls_.push_back(std::move(call));
    return UnitFunction::apply(x, model_.shard(calls_.back().unit), reinterpret_cast<int64_t>(&calls_.back()));
  };
  at::Tensor h = apply({this, 0, Kind::Embed, input_ids, {}}, input_ids);
  AttentionInputs attention = attention_inputs(model_.config(), input_ids, attention_mask, nullptr, compute_dtype_);
  for (size_t u = 1; u < model_.units().size(); ++u) h = apply({this, u, Kind::Layer, {}, attention}, h);
  return apply({this, 0, Kind::Head, {}, {}}, h);
}

}  // namespace areal
