#include "areal/fsdp/tensor_parallel.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <stdexcept>

#include "areal/model/tensor_slices.h"
#include "areal/util/strings.h"

namespace areal {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

at::Tensor summed(Communicator& group, const at::Tensor& x) {
  at::Tensor out = x.contiguous().clone();
  group.all_reduce(out, ReduceOp::Sum);
  return out;
}

// Forward: the partial outputs summed over the group. Backward: every rank's part of
// the sum gets the whole gradient (the ranks compute the same thing after it).
struct SumOverGroup : public torch::autograd::Function<SumOverGroup> {
  static at::Tensor forward(AutogradContext*, const at::Tensor& partial, Communicator* group) {
    return summed(*group, partial);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], {}}; }
};

// Forward: as is. Backward: the gradients of every rank's slices summed (each rank's
// projections saw the same input).
struct EnterGroup : public torch::autograd::Function<EnterGroup> {
  static at::Tensor forward(AutogradContext* ctx, const at::Tensor& x, Communicator* group) {
    ctx->saved_data["group"] = reinterpret_cast<int64_t>(group);
    return x.clone();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    auto* group = reinterpret_cast<Communicator*>(ctx->saved_data.at("group").toInt());
    return {summed(*group, grads[0]), {}};
  }
};

}  // namespace

TensorParallelism::TensorParallelism(Communicator& comm, const ModelConfig& config, int degree)
    : degree_(degree), config_(config) {
  const int world = comm.world_size(), rank = comm.rank();
  if (degree < 1 || world % degree != 0 || !tensor_parallel_splits(config, degree))
    throw std::invalid_argument(cat("TensorParallelism: groups of ", degree, " ranks over ", world, " ranks, ",
                                    config.num_attention_heads, " attention heads, ", config.num_key_value_heads,
                                    " key/value heads and ",
                                    config.intermediate_size, " MLP channels (the group size must divide the ranks, "
                                    "the heads and the channels, and divide or be a multiple of the key/value heads)"));
  if (config.num_experts > 0)
    throw std::invalid_argument("TensorParallelism: a mixture of experts is not built with tensor-parallel training");
  rank_ = rank % degree;
  group_ = comm.split(rank / degree, rank_);
  data_group_ = comm.split(rank_, rank / degree);
  local_ = tensor_parallel_config(config, degree);
  const int64_t rows = (config.vocab_size + degree - 1) / degree;
  vocab_begin_ = rank_ * rows;
  vocab_rows_ = std::clamp<int64_t>(config.vocab_size - vocab_begin_, 0, rows);
  layer_parallel_.enter = [this](const at::Tensor& x) { return enter(x); };
}

TensorParallelism::~TensorParallelism() = default;

at::Tensor TensorParallelism::layer_weight(const std::string& inside, const at::Tensor& whole) const {
  const TensorSlice slice = tensor_parallel_slice(config_, inside, whole, degree_, rank_);
  return slice.share == TensorShare::whole_partial ? enter(slice.weight) : slice.weight;
}

at::Tensor TensorParallelism::vocab_slice(const at::Tensor& whole) const {
  return whole.narrow(0, vocab_begin_, vocab_rows_);
}

bool TensorParallelism::counts_gradient(const std::string& name) const {
  if (rank_ == 0 || name == "model.embed_tokens.weight" || name == "lm_head.weight") return true;
  const std::string prefix = "model.layers.";
  if (!starts_with(name, prefix)) return false;  // the final norm
  const std::string inside = name.substr(name.find('.', prefix.size()) + 1);
  return tensor_parallel_share(inside) == TensorShare::split;
}

at::Tensor TensorParallelism::sum(const at::Tensor& partial) const { return SumOverGroup::apply(partial, group_.get()); }

at::Tensor TensorParallelism::enter(const at::Tensor& x) const { return EnterGroup::apply(x, group_.get()); }

VocabLogprobs vocab_parallel_logprobs(const TensorParallelism& tensor, const at::Tensor& logits,
                                      const at::Tensor& targets, double temperature, bool entropy) {
  Communicator& group = tensor.group();
  const at::Tensor z = logits.to(at::kFloat) / temperature;
  // The largest logit of each position over the group: a shift that cancels out, no gradient.
  at::Tensor shift = z.detach().amax(-1, /*keepdim=*/true);
  group.all_reduce(shift, ReduceOp::Max);
  const at::Tensor exp = (z - shift).exp();
  const at::Tensor total = tensor.sum(exp.sum(-1, /*keepdim=*/true));  // the softmax's denominator
  // The target's logit from the rank that holds it (0 from the others), summed.
  const at::Tensor local = targets.unsqueeze(-1) - tensor.vocab_begin();
  const at::Tensor mine = (local >= 0) & (local < tensor.vocab_rows());
  const at::Tensor picked = z.gather(-1, local.clamp(0, std::max<int64_t>(0, tensor.vocab_rows() - 1))) * mine;
  const at::Tensor target = tensor.sum(picked);
  VocabLogprobs out;
  out.logprobs = (target - shift - total.log()).squeeze(-1);
  if (entropy) {  // log Z - sum p z, with sum p z = sum exp(z - shift) z / total
    at::NoGradGuard no_grad;
    at::Tensor weighted = (exp.detach() * z.detach()).sum(-1, /*keepdim=*/true);
    group.all_reduce(weighted, ReduceOp::Sum);
    const at::Tensor z_total = total.detach();
    out.entropy = (shift + z_total.log() - weighted / z_total).squeeze(-1);
  }
  return out;
}

}  // namespace areal
