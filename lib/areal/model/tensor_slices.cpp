#include "areal/model/tensor_slices.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "areal/util/strings.h"

namespace areal {

namespace {

// What a layer weight is to tensor parallelism, from its name in the layer.
struct WeightRole {
  enum Module { column, row, head_norm, other } module = other;
  enum Leaf { weight, bias, lora_a, lora_b } leaf = weight;
  bool attention = false;  // q/k/v/o (else the MLP or an expert's)
  bool key_value = false;  // k/v: fewer heads, maybe shared
};

WeightRole role_of(const std::string& inside) {
  WeightRole role;
  std::string module = inside.substr(0, inside.rfind('.'));  // "self_attn.q_proj" (or ".lora_A")
  if (ends_with(inside, ".lora_A.weight") || ends_with(inside, ".lora_B.weight")) {
    role.leaf = ends_with(inside, ".lora_A.weight") ? WeightRole::lora_a : WeightRole::lora_b;
    module = module.substr(0, module.rfind('.'));
  } else if (ends_with(inside, ".bias")) {
    role.leaf = WeightRole::bias;
  }
  auto is = [&](const char* suffix) { return ends_with(module, suffix); };
  const bool expert = module.find(".experts.") != std::string::npos;
  role.key_value = is("self_attn.k_proj") || is("self_attn.v_proj");
  if (is("self_attn.q_proj") || role.key_value) {
    role.module = WeightRole::column;
    role.attention = true;
  } else if (is("self_attn.o_proj")) {
    role.module = WeightRole::row;
    role.attention = true;
  } else if (is("mlp.gate_proj") || is("mlp.up_proj") ||
             (expert && (is(".gate_proj") || is(".up_proj") || is(".w1") || is(".w3")))) {
    role.module = WeightRole::column;
  } else if (is("mlp.down_proj") || (expert && (is(".down_proj") || is(".w2")))) {
    role.module = WeightRole::row;
  } else if (is("self_attn.q_norm") || is("self_attn.k_norm")) {
    role.module = WeightRole::head_norm;
  }
  return role;
}

}  // namespace

ModelConfig tensor_parallel_config(const ModelConfig& config, int64_t ranks) {
  ModelConfig local = config;
  local.num_attention_heads /= ranks;
  local.num_key_value_heads = std::max<int64_t>(1, config.num_key_value_heads / ranks);
  local.intermediate_size /= ranks;
  local.moe_intermediate_size /= ranks;
  return local;
}

bool tensor_parallel_splits(const ModelConfig& c, int64_t t) {
  const int64_t kv = c.num_key_value_heads;
  return t >= 1 && c.num_attention_heads % t == 0 && c.intermediate_size % t == 0 && (kv % t == 0 || t % kv == 0);
}

at::Tensor embed_vocab_rows(const at::Tensor& rows, const at::Tensor& ids, int64_t first) {
  const at::Tensor local = ids - first;
  const at::Tensor mine = (local >= 0) & (local < rows.size(0));
  return at::embedding(rows, local.clamp(0, rows.size(0) - 1)) * mine.unsqueeze(-1).to(rows.scalar_type());
}

TensorShare tensor_parallel_share(const std::string& inside) {
  const WeightRole role = role_of(inside);
  switch (role.module) {
    case WeightRole::column: return role.leaf == WeightRole::lora_a ? TensorShare::whole_partial : TensorShare::split;
    case WeightRole::row:
      if (role.leaf == WeightRole::bias) return TensorShare::first_rank;
      return role.leaf == WeightRole::lora_b ? TensorShare::whole_partial : TensorShare::split;
    case WeightRole::head_norm: return TensorShare::whole_partial;
    default: return TensorShare::whole;
  }
}

TensorSlice tensor_parallel_slice(const ModelConfig& c, const std::string& inside, const at::Tensor& whole,
                                  int64_t t, int64_t r) {
  if (t == 1) return {whole, TensorShare::whole};
  const TensorShare share = tensor_parallel_share(inside);
  if (share == TensorShare::first_rank) return {r == 0 ? whole : at::Tensor(), share};
  if (share != TensorShare::split) return {whole, share};
  const WeightRole role = role_of(inside);
  const ModelConfig local = tensor_parallel_config(c, t);
  const bool expert = inside.find(".experts.") != std::string::npos;
  const int64_t channels = expert ? local.moe_intermediate_size : local.intermediate_size;
  const int64_t q = local.num_attention_heads * c.head_dim;
  if (role.module == WeightRole::row) {  // input columns
    const int64_t n = role.attention ? q : channels;
    return {whole.narrow(1, r * n, n), share};
  }
  if (role.key_value) {  // the key/value heads of this rank's query heads: its 1/t, or the one it shares
    const int64_t first = r * c.num_key_value_heads / t * c.head_dim;
    return {whole.narrow(0, first, local.num_key_value_heads * c.head_dim), share};
  }
  const int64_t n = role.attention ? q : channels;  // output rows: the rank's heads or channels
  return {whole.narrow(0, r * n, n), share};
}

}  // namespace areal
