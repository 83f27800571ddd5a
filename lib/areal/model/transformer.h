// The decoder-only transformer of the Qwen2 / Qwen3 / LLaMA / Mistral / Gemma families, computing what
// `transformers` computes. Parameter names are the Hugging Face names
// (`model.layers.3.self_attn.q_proj.weight`), so loading needs no renaming table.
//
// The modules hold parameters (names, shapes, storage); the computation is in
// functional.h. The model knows nothing about sharding. Built with a meta-device
// TensorOptions it has shapes and names but no storage (the skeleton of the staged
// initialization).
#pragma once

#include <torch/nn/module.h>

#include <map>
#include <vector>

#include "areal/model/functional.h"
#include "areal/model/model_config.h"

namespace areal {

// Keys and values of every layer for the tokens seen so far: [batch, kv_heads, length, head_dim].
struct KVCache {
  std::vector<at::Tensor> keys;
  std::vector<at::Tensor> values;
  at::Tensor attention_mask;  // [batch, length]: 1 for tokens, 0 for padding
  int64_t length() const { return keys.empty() || !keys[0].defined() ? 0 : keys[0].size(2); }
};

class DecoderLayer : public torch::nn::Module {
 public:
  DecoderLayer(const ModelConfig& config, int64_t index, const at::TensorOptions& options);
  at::Tensor forward(const at::Tensor& x, const AttentionInputs& attention, at::Tensor& keys, at::Tensor& values,
                     RouterTally* router = nullptr, ExpertChoices* choices = nullptr);

 private:
  ModelConfig config_;
  int64_t index_;
  std::map<std::string, at::Tensor> weights_;  // by name inside the layer; shares storage with the parameters
};

// Embeddings, decoder layers, final norm: `model.*` in Hugging Face names.
class DecoderStack : public torch::nn::Module {
 public:
  DecoderStack(const ModelConfig& config, const at::TensorOptions& options);
  at::Tensor embed_tokens;  // [vocab, hidden]
  std::vector<std::shared_ptr<DecoderLayer>> layers;
  at::Tensor norm;          // [hidden]
};

class CausalLM : public torch::nn::Module {
 public:
  CausalLM(const ModelConfig& config, const at::TensorOptions& options);

  // input_ids [B, T] -> logits [B, T, vocab].
  // attention_mask [B, T] (1 token, 0 padding) is optional; positions default to
  // 0.. for each sequence, counting only its tokens (left padding is skipped over).
  // With a cache, the tokens continue the cached ones and the cache grows by T.
  // `routers`: each sparse layer's router tally appended, in layer order (for
  // load_balancing_loss). `choices`: one per sparse layer, in layer order (resized to
  // them when empty), read and filled as decoder_layer does (ExpertChoices).
  at::Tensor forward(const at::Tensor& input_ids, const at::Tensor& attention_mask = {}, KVCache* cache = nullptr,
                     std::vector<RouterTally>* routers = nullptr, std::vector<ExpertChoices>* choices = nullptr);

  const ModelConfig& config() const { return config_; }
  std::shared_ptr<DecoderStack> model;
  at::Tensor lm_head;  // undefined when tied to model->embed_tokens

 private:
  ModelConfig config_;
};

}  // namespace areal
