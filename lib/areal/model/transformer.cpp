#include "areal/model/transformer.h"

#include <ATen/ATen.h>

#include "areal/model/rotary.h"
#include "areal/util/strings.h"

namespace areal {

RMSNorm::RMSNorm(int64_t dim, double eps, const at::TensorOptions& options) : eps_(eps) {
  weight = register_parameter("weight", at::ones({dim}, options));
}

at::Tensor RMSNorm::forward(const at::Tensor& x) {
  // As transformers does: normalize in float32, scale in the input dtype.
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * normed.to(x.scalar_type());
}

Linear::Linear(int64_t in, int64_t out, bool with_bias, const at::TensorOptions& options) {
  weight = register_parameter("weight", at::empty({out, in}, options));
  if (with_bias) bias = register_parameter("bias", at::empty({out}, options));
}

at::Tensor Linear::forward(const at::Tensor& x) { return at::linear(x, weight, bias); }

Attention::Attention(const ModelConfig& c, const at::TensorOptions& options)
    : heads_(c.num_attention_heads), kv_heads_(c.num_key_value_heads), head_dim_(c.head_dim) {
  q_proj_ = register_module("q_proj", std::make_shared<Linear>(c.hidden_size, heads_ * head_dim_, c.qkv_bias, options));
  k_proj_ = register_module("k_proj", std::make_shared<Linear>(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias, options));
  v_proj_ = register_module("v_proj", std::make_shared<Linear>(c.hidden_size, kv_heads_ * head_dim_, c.qkv_bias, options));
  o_proj_ = register_module("o_proj", std::make_shared<Linear>(heads_ * head_dim_, c.hidden_size, c.o_bias, options));
  if (c.qk_norm) {
    q_norm_ = register_module("q_norm", std::make_shared<RMSNorm>(head_dim_, c.rms_norm_eps, options));
    k_norm_ = register_module("k_norm", std::make_shared<RMSNorm>(head_dim_, c.rms_norm_eps, options));
  }
}

at::Tensor Attention::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                              const at::Tensor& mask, at::Tensor& keys, at::Tensor& values) {
  const int64_t batch = x.size(0), length = x.size(1);
  at::Tensor q = q_proj_->forward(x).view({batch, length, heads_, head_dim_});
  at::Tensor k = k_proj_->forward(x).view({batch, length, kv_heads_, head_dim_});
  at::Tensor v = v_proj_->forward(x).view({batch, length, kv_heads_, head_dim_}).transpose(1, 2);
  if (q_norm_) {  // Qwen3 normalizes each head before the rotation
    q = q_norm_->forward(q);
    k = k_norm_->forward(k);
  }
  q = apply_rotary(q.transpose(1, 2), cos, sin);
  k = apply_rotary(k.transpose(1, 2), cos, sin);

  keys = keys.defined() ? at::cat({keys, k}, 2) : k;
  values = values.defined() ? at::cat({values, v}, 2) : v;

  // Grouped-query attention: each key/value head serves heads/kv_heads query heads.
  const int64_t group = heads_ / kv_heads_;
  at::Tensor k_all = group == 1 ? keys : keys.repeat_interleave(group, 1);
  at::Tensor v_all = group == 1 ? values : values.repeat_interleave(group, 1);
  at::Tensor out = at::scaled_dot_product_attention(q, k_all, v_all, mask);
  return o_proj_->forward(out.transpose(1, 2).reshape({batch, length, heads_ * head_dim_}));
}

MLP::MLP(const ModelConfig& c, const at::TensorOptions& options) {
  gate_proj_ = register_module("gate_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, false, options));
  up_proj_ = register_module("up_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, false, options));
  down_proj_ = register_module("down_proj", std::make_shared<Linear>(c.intermediate_size, c.hidden_size, false, options));
}

at::Tensor MLP::forward(const at::Tensor& x) {
  return down_proj_->forward(at::silu(gate_proj_->forward(x)) * up_proj_->forward(x));
}

DecoderLayer::DecoderLayer(const ModelConfig& c, const at::TensorOptions& options) {
  input_layernorm_ = register_module("input_layernorm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, options));
  self_attn_ = register_module("self_attn", std::make_shared<Attention>(c, options));
  post_attention_layernorm_ =
      register_module("post_attention_layernorm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, options));
  mlp_ = register_module("mlp", std::make_shared<MLP>(c, options));
}

at::Tensor DecoderLayer::forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin,
                                 const at::Tensor& mask, at::Tensor& keys, at::Tensor& values) {
  at::Tensor h = x + self_attn_->forward(input_layernorm_->forward(x), cos, sin, mask, keys, values);
  return h + mlp_->forward(post_attention_layernorm_->forward(h));
}

DecoderStack::DecoderStack(const ModelConfig& c, const at::TensorOptions& options) {
  embed_tokens = register_module("embed_tokens", std::make_shared<torch::nn::Module>())
                     ->register_parameter("weight", at::empty({c.vocab_size, c.hidden_size}, options));
  auto list = register_module("layers", std::make_shared<torch::nn::Module>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers.push_back(list->register_module(std::to_string(i), std::make_shared<DecoderLayer>(c, options)));
  norm = register_module("norm", std::make_shared<RMSNorm>(c.hidden_size, c.rms_norm_eps, options));
}

CausalLM::CausalLM(const ModelConfig& config, const at::TensorOptions& options) : config_(config) {
  model = register_module("model", std::make_shared<DecoderStack>(config, options));
  if (!config.tie_word_embeddings)
    lm_head = register_module("lm_head", std::make_shared<torch::nn::Module>())
                  ->register_parameter("weight", at::empty({config.vocab_size, config.hidden_size}, options));
}

at::Tensor CausalLM::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask, KVCache* cache) {
  const int64_t batch = input_ids.size(0), length = input_ids.size(1);
  const int64_t past = cache ? cache->length() : 0;
  const auto device = input_ids.device();

  // Which keys each sequence has (1) and which are padding (0), past and present.
  at::Tensor present = attention_mask.defined() ? attention_mask.to(device, at::kLong)
                                                : at::ones({batch, length}, input_ids.options().dtype(at::kLong));
  at::Tensor key_mask = present;
  if (cache && past > 0) key_mask = at::cat({cache->attention_mask, present}, 1);
  if (cache) cache->attention_mask = key_mask;

  // Position of a token = number of real tokens before it in its sequence.
  at::Tensor positions = (key_mask.cumsum(1) - 1).clamp_min(0).narrow(1, past, length);

  // May attend: keys at or before the query, not padding; a query always sees itself,
  // so a padding row never becomes all -inf (which would make NaNs).
  at::Tensor query_index = at::arange(past, past + length, positions.options()).view({1, 1, length, 1});
  at::Tensor key_index = at::arange(past + length, positions.options()).view({1, 1, 1, past + length});
  at::Tensor mask = (key_index <= query_index) & key_mask.view({batch, 1, 1, past + length}).to(at::kBool);
  mask = mask | (key_index == query_index);

  at::Tensor h = at::embedding(model->embed_tokens, input_ids);
  auto [cos, sin] = rotary_cos_sin(positions, config_.head_dim, config_.rope_theta, h.scalar_type());
  if (cache && cache->keys.empty()) {
    cache->keys.resize(model->layers.size());
    cache->values.resize(model->layers.size());
  }
  for (size_t i = 0; i < model->layers.size(); ++i) {
    at::Tensor keys = cache ? cache->keys[i] : at::Tensor();
    at::Tensor values = cache ? cache->values[i] : at::Tensor();
    h = model->layers[i]->forward(h, cos, sin, mask, keys, values);
    if (cache) {
      cache->keys[i] = keys;
      cache->values[i] = values;
    }
  }
  h = model->norm->forward(h);
  return at::linear(h, lm_head.defined() ? lm_head : model->embed_tokens);
}

}  // namespace areal
