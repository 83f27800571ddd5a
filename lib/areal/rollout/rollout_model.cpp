#include "areal/rollout/rollout_model.h"

#include <ATen/ATen.h>

#include "areal/model/packed_weights.h"
#include "areal/model/tensor_slices.h"
#include "areal/util/error.h"
#include "areal/util/strings.h"

namespace areal {

void check_tensor_parallel(const ModelConfig& c, int64_t t, bool whole_experts) {
  auto refuse = [&](int64_t count, const char* what) {
    throw ConfigError(cat("option 'rollout.backend': ", t, " tensor-parallel ranks cannot split the model's ", count,
                          " ", what, " evenly; use a t that divides ", c.num_attention_heads,
                          " (the attention heads) and ", c.intermediate_size, " (intermediate_size)"));
  };
  if (c.num_attention_heads % t != 0) refuse(c.num_attention_heads, "attention heads (num_attention_heads)");
  if (c.intermediate_size % t != 0) refuse(c.intermediate_size, "MLP channels (intermediate_size)");
  if (whole_experts && c.num_experts == 0)
    throw ConfigError(cat("option 'rollout.backend': e", t, " places a mixture of experts' experts whole on the ranks; "
                          "the model is dense (use e1)"));
  if (whole_experts && c.num_experts % t != 0)
    throw ConfigError(cat("option 'rollout.backend': the model's ", c.num_experts, " experts do not divide over ", t,
                          " ranks (e", t, "); use e1 (each expert split over t) or a t that divides them"));
  if (c.num_experts > 0 && !whole_experts && c.moe_intermediate_size % t != 0)
    refuse(c.moe_intermediate_size, "channels of each expert (moe_intermediate_size)");
  // Fewer key/value heads than ranks: each is replicated on t / kv_heads ranks.
  const int64_t kv = c.num_key_value_heads;
  if (kv % t != 0 && t % kv != 0) refuse(kv, "key/value heads (num_key_value_heads; t must divide them or be a multiple)");
}

int64_t tensor_parallel_kv_heads(const ModelConfig& c, int64_t t) {
  return tensor_parallel_config(c, t).num_key_value_heads;
}

namespace {

// Products that read the same input, run as one by decoder_layer (functional.h): at the
// few rows of a decode step each call's fixed cost and each small weight's poor use of
// the matrix unit count (q 640 x 640, k and v 128 x 640 in the bench model).
struct FusedProduct {
  const char* name;
  std::vector<std::string> parts;  // in the fused weight's row order
};
const FusedProduct kFusedProducts[] = {
    {"self_attn.qkv_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
    {"mlp.gate_up_proj", {"mlp.gate_proj", "mlp.up_proj"}},
};

// Each part's rows in fused product `f` of `total` rows on a rank holding `local`'s heads:
// q, k and v by their heads, gate and up halves (as decoder_layer splits the product).
std::vector<int64_t> part_rows(const FusedProduct& f, const ModelConfig& local, int64_t total) {
  if (std::string(f.name) != "self_attn.qkv_proj") return {total / 2, total / 2};
  const int64_t kv_rows = local.num_key_value_heads * local.head_dim;
  return {local.num_attention_heads * local.head_dim, kv_rows, kv_rows};
}

bool is_fused_part(const std::string& inside) {
  for (const FusedProduct& f : kFusedProducts)
    for (const std::string& part : f.parts)
      if (inside == part + ".weight" || inside == part + ".bias") return true;
  return false;
}

// "model.layers.12.mlp.up_proj.weight" -> (12, "mlp.up_proj.weight"); -1 for other names.
std::pair<int64_t, std::string> split_layer_name(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (!starts_with(name, prefix)) return {-1, name};
  const size_t dot = name.find('.', prefix.size());
  return {std::stoll(name.substr(prefix.size(), dot - prefix.size())), name.substr(dot + 1)};
}

}  // namespace

RolloutModel::RolloutModel(const CausalLM& model) : config_(model.config()), local_(model.config()) {
  options_ = model.model->embed_tokens.options();
  vocab_rows_ = config_.vocab_size;
  layers_.resize(config_.num_hidden_layers);
  for (const auto& item : model.named_parameters()) add_slice(item.key(), item.value(), /*own=*/false);
}

RolloutModel::RolloutModel(const Policy& policy, Communicator* group, at::ScalarType dtype, const at::Device& device,
                           bool whole_experts)
    : RolloutModel(
          policy.config(), policy.unit_count(), [&](size_t u) { return policy.unit_weights(u, dtype); }, group, dtype,
          device, whole_experts) {}

RolloutModel::RolloutModel(const ModelConfig& config, size_t units, const UnitSource& unit, Communicator* group,
                           at::ScalarType dtype, const at::Device& device, bool whole_experts)
    : config_(config),
      local_(config),
      group_(group),
      tensor_parallel_(group ? group->world_size() : 1),
      rank_(group ? group->rank() : 0) {
  const bool whole = whole_experts && tensor_parallel_ > 1;
  check_tensor_parallel(config_, tensor_parallel_, whole);
  local_ = tensor_parallel_config(config_, tensor_parallel_);  // each expert split like the dense MLP; the router whole
  if (whole) {  // experts whole, E/t on each rank
    local_.moe_intermediate_size = config_.moe_intermediate_size;
    whole_experts_.ranks = tensor_parallel_;
    whole_experts_.rank = rank_;
  }
  vocab_rows_ = (config_.vocab_size + tensor_parallel_ - 1) / tensor_parallel_;
  vocab_begin_ = rank_ * vocab_rows_;
  options_ = at::TensorOptions().dtype(dtype).device(device);
  layers_.resize(config_.num_hidden_layers);
  replace(units, unit);
}

void RolloutModel::replace(size_t units, const UnitSource& unit) {
  at::NoGradGuard no_grad;
  // One unit whole at a time: its slices are copied out (own = true) and the whole
  // unit is freed before the next one comes.
  for (size_t u = 0; u < units; ++u)
    for (auto& [name, weight] : unit(u))
      add_slice(name, weight.to(options_.device(), c10::typeMetaToScalarType(options_.dtype())), /*own=*/true);
}

void RolloutModel::add_slice(const std::string& name, const at::Tensor& whole, bool own) {
  const int64_t t = tensor_parallel_, r = rank_;
  // A slice that is a view of `whole` would keep the whole unit alive: copy it when asked.
  auto kept = [&](const at::Tensor& slice) {
    return own && slice.defined() && slice.is_alias_of(whole) ? slice.clone(at::MemoryFormat::Contiguous) : slice;
  };
  auto vocab_slice = [&] {
    if (t == 1) return whole;
    at::Tensor out = at::zeros({vocab_rows_, whole.size(1)}, whole.options());
    const int64_t real = std::clamp<int64_t>(config_.vocab_size - vocab_begin_, 0, vocab_rows_);
    if (real > 0) out.narrow(0, 0, real).copy_(whole.narrow(0, vocab_begin_, real));
    return out;
  };
  // The products' weights packed for the CPU (packed_weights.h): a packed copy replaces
  // the slice (so it needs no copy of its own first), or sits beside a shared or tied one.
  auto packed = [&](const at::Tensor& weight) { return can_pack_weight(weight) ? pack_weight(weight) : kept(weight); };
  if (name == "model.embed_tokens.weight") {
    embed_ = kept(vocab_slice());
    if (config_.tie_word_embeddings) head_ = packed(embed_);
    return;
  }
  if (name == "lm_head.weight") {
    head_ = packed(vocab_slice());
    return;
  }
  if (name == "model.norm.weight") {
    norm_ = kept(whole);
    return;
  }
  auto [layer, inside] = split_layer_name(name);
  if (layer < 0) throw std::invalid_argument(cat("RolloutModel: unexpected weight '", name, "'"));
  at::Tensor slice = whole;  // the norms (and everything at t = 1)
  if (t > 1) {
    if (const size_t at = inside.find(".experts."); at != std::string::npos && whole_experts_.ranks > 1) {
      const int64_t e = std::stoll(inside.substr(at + std::string(".experts.").size()));
      const int64_t per_rank = config_.num_experts / t;  // whole, on the rank that runs it
      slice = e / per_rank == r ? whole : at::Tensor();
    } else {
      slice = tensor_parallel_slice(config_, inside, whole, t, r).weight;  // model/tensor_slices.h
    }
  }
  if (!slice.defined()) return;
  // A fused product's parts wait for the rest of their group, which comes in the same
  // unit (fuse_products copies them into one weight).
  std::map<std::string, at::Tensor>& weights = layers_.at(layer);
  const bool part = is_fused_part(inside);
  weights[inside] = part ? slice : ends_with(inside, "_proj.weight") ? packed(slice) : kept(slice);
  if (part) fuse_products(weights);
}

void RolloutModel::fuse_products(std::map<std::string, at::Tensor>& weights) {
  auto find = [&](const std::string& name) {
    auto it = weights.find(name);
    return it == weights.end() ? at::Tensor() : it->second;
  };
  for (const FusedProduct& f : kFusedProducts) {
    std::vector<at::Tensor> parts, biases;
    for (const std::string& part : f.parts) {
      if (at::Tensor w = find(part + ".weight"); w.defined()) parts.push_back(w);
      if (at::Tensor b = find(part + ".bias"); b.defined()) biases.push_back(b);
    }
    // All the weights here, and all their biases or none (a part's bias may come after it).
    if (parts.size() != f.parts.size() || (!biases.empty() && biases.size() != parts.size())) continue;
    at::Tensor weight = at::cat(parts), bias = biases.empty() ? at::Tensor() : at::cat(biases);
    for (const std::string& part : f.parts) {
      weights.erase(part + ".weight");
      weights.erase(part + ".bias");
    }
    weights[cat(f.name, ".weight")] = can_pack_weight(weight) ? pack_weight(weight) : weight;
    if (bias.defined()) weights[cat(f.name, ".bias")] = bias;
  }
}

int64_t RolloutModel::weight_bytes() const {
  auto bytes_of = [](const at::Tensor& t) { return t.defined() ? t.numel() * t.element_size() : 0; };
  int64_t bytes = bytes_of(embed_) + bytes_of(norm_) + (head_.is_same(embed_) ? 0 : bytes_of(head_));
  for (const auto& layer : layers_)
    for (const auto& [name, t] : layer) bytes += bytes_of(t);
  return bytes;
}

std::map<std::string, at::Tensor> RolloutModel::named_slices() const {
  std::map<std::string, at::Tensor> out = {{"model.embed_tokens.weight", embed_}, {"model.norm.weight", norm_}};
  if (!config_.tie_word_embeddings) out["lm_head.weight"] = unpacked_weight(head_);
  for (size_t i = 0; i < layers_.size(); ++i) {
    for (const auto& [name, t] : layers_[i]) {
      const std::string prefix = cat("model.layers.", i, ".");
      const FusedProduct* fused = nullptr;
      for (const FusedProduct& f : kFusedProducts)
        if (starts_with(name, cat(f.name, "."))) fused = &f;
      if (!fused) {
        out[prefix + name] = unpacked_weight(t);
        continue;
      }
      // A fused product's rows, back into its parts.
      const std::string kind = name.substr(std::string(fused->name).size());  // ".weight" or ".bias"
      const at::Tensor whole = unpacked_weight(t);
      const std::vector<at::Tensor> pieces = whole.split_with_sizes(part_rows(*fused, local_, whole.size(0)));
      for (size_t p = 0; p < pieces.size(); ++p) out[prefix + fused->parts[p] + kind] = pieces[p];
    }
  }
  return out;
}

void RolloutModel::all_reduce(at::Tensor& t) { group_->all_reduce(t, ReduceOp::Sum); }

at::Tensor RolloutModel::embed(const at::Tensor& ids) {
  if (tensor_parallel_ == 1) return embed_tokens(config_, embed_, ids);
  // Each rank looks up the ids in its rows (zeros for the others); the sum has every row.
  at::Tensor hidden = embed_vocab_rows(embed_, ids, vocab_begin_);
  all_reduce(hidden);
  return scale_embeddings(config_, hidden);
}

at::Tensor RolloutModel::layer(size_t i, const at::Tensor& hidden, const AttentionInputs& attention,
                               ExpertChoices* choices) {
  const auto& weights = layers_.at(i);
  auto lookup = [&weights](const std::string& name) {
    auto it = weights.find(name);
    return it == weights.end() ? at::Tensor() : it->second;
  };
  PartialSumReduce reduce;
  if (tensor_parallel_ > 1) reduce = [this](at::Tensor& partial) { all_reduce(partial); };
  at::Tensor unused_keys, unused_values;  // the cache keeps them
  return decoder_layer(local_, static_cast<int64_t>(i), lookup, hidden, attention, unused_keys, unused_values, 0.0,
                       reduce, nullptr, choices, {whole_experts_.ranks > 1 ? &whole_experts_ : nullptr, nullptr});
}

at::Tensor RolloutModel::local_logits(const at::Tensor& hidden) {
  return lm_logits(config_, norm_, head_, hidden);
}

}  // namespace areal
