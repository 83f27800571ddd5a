#include "areal/model/functional.h"

#include <ATen/ATen.h>

#include "areal/model/rotary.h"
#include "areal/model/transformer.h"

namespace areal {

AttentionInputs attention_inputs(const ModelConfig& config, const at::Tensor& input_ids,
                                 const at::Tensor& attention_mask, KVCache* cache, at::ScalarType dtype) {
  const int64_t batch = input_ids.size(0), length = input_ids.size(1);
  const int64_t past = cache ? cache->length() : 0;
  at::Tensor present = attention_mask.defined()
                           ? attention_mask.to(input_ids.device(), at::kLong)
                           : at::ones({batch, length}, input_ids.options().dtype(at::kLong));
  at::Tensor key_mask = cache && past > 0 ? at::cat({cache->attention_mask, present}, 1) : present;
  if (cache) cache->attention_mask = key_mask;

  at::Tensor positions = (key_mask.cumsum(1) - 1).clamp_min(0).narrow(1, past, length);
  at::Tensor query_index = at::arange(past, past + length, positions.options()).view({1, 1, length, 1});
  at::Tensor key_index = at::arange(past + length, positions.options()).view({1, 1, 1, past + length});
  at::Tensor mask = (key_index <= query_index) & key_mask.view({batch, 1, 1, past + length}).to(at::kBool);
  mask = mask | (key_index == query_index);

  AttentionInputs inputs;
  std::tie(inputs.cos, inputs.sin) = rotary_cos_sin(positions, config, dtype);
  inputs.mask = mask;
  return inputs;
}

AttentionInputs packed_attention_inputs(const ModelConfig& config, const std::vector<int64_t>& lengths,
                                        const at::Device& device, at::ScalarType dtype) {
  std::vector<int64_t> starts = {0};
  std::vector<at::Tensor> positions;
  for (int64_t length : lengths) {
    starts.push_back(starts.back() + length);
    positions.push_back(at::arange(length, at::kLong));
  }
  AttentionInputs inputs;
  std::tie(inputs.cos, inputs.sin) =
      rotary_cos_sin(at::cat(positions).view({1, -1}).to(device), config, dtype);
  inputs.sequence_starts = at::tensor(starts, at::kLong);
  return inputs;
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  // As transformers does: normalize in float32, scale in the input dtype.
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

at::Tensor decoder_layer(const ModelConfig& c, const LayerWeights& w, const at::Tensor& x,
                         const AttentionInputs& attention, at::Tensor& keys, at::Tensor& values, double lora_scale,
                         const PartialSumReduce& reduce) {
  const int64_t batch = x.size(0), length = x.size(1);
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, head_dim = c.head_dim;
  auto linear = [&](const at::Tensor& in, const std::string& name) {
    at::Tensor out = at::linear(in, w(name + ".weight"), w(name + ".bias"));
    if (at::Tensor a = w(name + ".lora_A.weight"); a.defined())
      out = out + at::linear(at::linear(in, a), w(name + ".lora_B.weight")) * lora_scale;
    return out;
  };

  at::Tensor h = rms_norm(x, w("input_layernorm.weight"), c.rms_norm_eps);
  at::Tensor q = linear(h, "self_attn.q_proj").view({batch, length, heads, head_dim});
  at::Tensor k = linear(h, "self_attn.k_proj").view({batch, length, kv_heads, head_dim});
  at::Tensor v = linear(h, "self_attn.v_proj").view({batch, length, kv_heads, head_dim}).transpose(1, 2);
  if (c.qk_norm) {  // Qwen3 normalizes each head before the rotation
    q = rms_norm(q, w("self_attn.q_norm.weight"), c.rms_norm_eps);
    k = rms_norm(k, w("self_attn.k_norm.weight"), c.rms_norm_eps);
  }
  q = apply_rotary(q.transpose(1, 2), attention.cos, attention.sin);
  k = apply_rotary(k.transpose(1, 2), attention.cos, attention.sin);
  // Grouped-query attention: each key/value head serves heads / kv_heads query heads;
  // attention reads the shared heads in place (enable_gqa) instead of copies per query head.
  const bool gqa = heads != kv_heads;
  at::Tensor attended;
  if (attention.cached) {
    attended = attention.cached(q, k, v);
  } else if (attention.sequence_starts.defined()) {  // packed: causal attention inside each sequence only
    const int64_t* starts = attention.sequence_starts.data_ptr<int64_t>();
    std::vector<at::Tensor> parts;
    for (int64_t i = 0; i + 1 < attention.sequence_starts.numel(); ++i) {
      const int64_t begin = starts[i], n = starts[i + 1] - starts[i];
      parts.push_back(at::scaled_dot_product_attention(q.narrow(2, begin, n), k.narrow(2, begin, n),
                                                       v.narrow(2, begin, n), {}, 0.0, /*is_causal=*/true,
                                                       std::nullopt, gqa));
    }
    attended = at::cat(parts, 2);
  } else {
    keys = keys.defined() ? at::cat({keys, k}, 2) : k;
    values = values.defined() ? at::cat({values, v}, 2) : v;
    attended = at::scaled_dot_product_attention(q, keys, values, attention.mask, 0.0, false, std::nullopt, gqa);
  }
  at::Tensor attention_out = linear(attended.transpose(1, 2).reshape({batch, length, heads * head_dim}), "self_attn.o_proj");
  if (reduce) reduce(attention_out);
  at::Tensor after_attention = x + attention_out;

  at::Tensor m = rms_norm(after_attention, w("post_attention_layernorm.weight"), c.rms_norm_eps);
  at::Tensor mlp = linear(at::silu(linear(m, "mlp.gate_proj")) * linear(m, "mlp.up_proj"), "mlp.down_proj");
  if (reduce) reduce(mlp);
  return after_attention + mlp;
}

at::Tensor lm_logits(const ModelConfig& c, const at::Tensor& norm_weight, const at::Tensor& head_weight,
                     const at::Tensor& hidden) {
  return at::linear(rms_norm(hidden, norm_weight, c.rms_norm_eps), head_weight);
}

}  // namespace areal
