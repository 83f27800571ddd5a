// The decoder-only transformer of the Qwen2 / Qwen3 / LLaMA families, computing what
// `transformers` computes. Parameter names are the Hugging Face names
// (`model.layers.3.self_attn.q_proj.weight`), so loading needs no renaming table.
//
// The model knows nothing about sharding. Built with a meta-device TensorOptions it
// has shapes and names but no storage (the skeleton of the staged initialization).
#pragma once

#include <torch/nn/module.h>

#include <vector>

#include "areal/model/model_config.h"

namespace areal {

// Keys and values of every layer for the tokens seen so far: [batch, kv_heads, length, head_dim].
struct KVCache {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  at::Tensor attention_mask;  // [batch, length]: 1 for tokens, 0 for padding
  int64_t length() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }
};

class RMSNorm : public torch::nn::Module {
 public:
  RMSNorm(int64_t dim, double eps, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight;

 private:
  double eps_;
};

class Linear : public torch::nn::Module {
 public:
  Linear(int64_t in, int64_t out, bool bias, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);
  at::Tensor weight, bias;
};

class Attention : public torch::nn::Module {
 public:
  Attention(const ModelConfig& config, const at::TensorOptions& options);
  // x [B, T, hidden]; cos/sin [B, T, head_dim]; mask [B, 1, T, S] (true = may attend);
  // past_k/past_v updated to include this step's keys and values.
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask,
                     at::Tensor& keys, at::Tensor& values);

 private:
  int64_t heads_, kv_heads_, head_dim_;
  std::shared_ptr<Linear> q_proj_, k_proj_, v_proj_, o_proj_;
  std::shared_ptr<RMSNorm> q_norm_, k_norm_;  // Qwen3 only
};

class MLP : public torch::nn::Module {
 public:
  MLP(const ModelConfig& config, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x);

 private:
  std::shared_ptr<Linear> gate_proj_, up_proj_, down_proj_;
};

class DecoderLayer : public torch::nn::Module {
 public:
  DecoderLayer(const ModelConfig& config, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, const at::Tensor& mask,
                     at::Tensor& keys, at::Tensor& values);

 private:
  std::shared_ptr<RMSNorm> input_layernorm_, post_attention_layernorm_;
  std::shared_ptr<Attention> self_attn_;
  std::shared_ptr<MLP> mlp_;
};

// Embeddings, decoder layers, final norm: `model.*` in Hugging Face names.
class DecoderStack : public torch::nn::Module {
 public:
  DecoderStack(const ModelConfig& config, const at::TensorOptions& options);
  at::Tensor embed_tokens;  // [vocab, hidden]
  std::vector<std::shared_ptr<DecoderLayer>> layers;
  std::shared_ptr<RMSNorm> norm;
};

class CausalLM : public torch::nn::Module {
 public:
  CausalLM(const ModelConfig& config, const at::TensorOptions& options);

  // input_ids [B, T] -> logits [B, T, vocab].
  // attention_mask [B, T] (1 token, 0 padding) is optional; positions default to
  // 0.. for each sequence, counting only its tokens (left padding is skipped over).
  // With a cache, the tokens continue the cached ones and the cache grows by T.
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {}, KVCache* cache = nullptr);

  const ModelConfig& config() const { return config_; }
  std::shared_ptr<DecoderStack> model;
  at::Tensor lm_head;  // undefined when tied to model->embed_tokens

 private:
  ModelConfig config_;
};

}  // namespace areal
