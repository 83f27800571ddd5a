// A decoder-only model's shape, read from a Hugging Face config.json.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace areal {

// Rotary scaling as transformers' rope_parameters (or the older rope_scaling) name it:
// "default", "linear" (positions divided by factor), "llama3" (Llama 3.1+: low
// frequencies divided by factor, a smooth ramp between) or "yarn" (NTK-by-parts with an
// attention factor on cos and sin) or "dynamic" (NTK: the base grows with the longest
// position past max_position_embeddings). rotary.h turns it into frequencies.
struct RopeScaling {
  std::string type = "default";
  double factor = 1;
  double low_freq_factor = 1, high_freq_factor = 4;  // llama3
  int64_t original_max_position_embeddings = 0;      // llama3, yarn
  double attention_factor = -1;                      // yarn; < 0: from factor (and mscale)
  double beta_fast = 32, beta_slow = 1, mscale = 0, mscale_all_dim = 0;  // yarn
  bool truncate = true;                                                  // yarn
};

struct ModelConfig {
  std::string model_type;  // "qwen2", "qwen3", "llama", "mistral", "gemma2", "gemma3_text", "qwen3_moe" or "mixtral"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;  // Qwen2 always; LLaMA and Qwen3 with attention_bias
  bool o_bias = false;    // LLaMA and Qwen3 with attention_bias
  bool qk_norm = false;   // Qwen3: RMSNorm on each head of q and k
  // Tokens a query attends back to, itself included, in the sliding layers (Mistral's
  // sliding_window on every layer, Gemma's sliding layers, Qwen2's use_sliding_window from
  // max_window_layers on); 0: none.
  int64_t sliding_window = 0;
  std::vector<bool> sliding_layers;  // which layers have the window (empty: all when sliding_window > 0)

  // Gemma 2 and 3: RMSNorm scales by (1 + w) in float32; the MLP is GELU-tanh; embeddings
  // are scaled by sqrt(hidden_size); norms after the attention and the MLP outputs too
  // (pre_feedforward_layernorm before the MLP).
  bool gemma = false;
  std::string hidden_act = "silu";       // or gelu_pytorch_tanh
  double attention_scale = 0;            // query_pre_attn_scalar ** -0.5; 0: head_dim ** -0.5
  double attn_logit_softcapping = 0;     // Gemma 2: tanh(s / c) * c on attention scores; 0: none
  double final_logit_softcapping = 0;    // Gemma 2: the same on the logits
  double rope_local_theta = 0;           // Gemma 3: the sliding layers' rope base (default rope); 0: none

  // Mixture of experts (qwen3_moe, mixtral): a sparse layer's MLP is a router over
  // num_experts experts of moe_intermediate_size; each token takes the top
  // num_experts_per_tok by softmax probability, weighted by them (renormalized to sum 1
  // with norm_topk_prob; Mixtral always). Qwen3-MoE's dense layers (mlp_only_layers,
  // decoder_sparse_step) keep an MLP of intermediate_size.
  int64_t num_experts = 0;  // 0: a dense model
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  std::vector<bool> sparse_layers;      // which layers are mixtures (empty for a dense model)
  double router_aux_loss_coef = 0;      // the load-balancing loss's weight (with output_router_logits)
  bool output_router_logits = false;

  bool layer_is_sparse(int64_t layer) const {
    return num_experts > 0 && sparse_layers.at(static_cast<size_t>(layer));
  }
  int64_t sparse_layer_count() const {
    return num_experts > 0 ? static_cast<int64_t>(std::count(sparse_layers.begin(), sparse_layers.end(), true)) : 0;
  }
  // A sparse layer's weight names inside the layer, as the Hub writes them: Qwen3-MoE's
  // mlp.gate / mlp.experts.<e>.{gate,up,down}_proj, Mixtral's block_sparse_moe.gate /
  // block_sparse_moe.experts.<e>.{w1,w3,w2}.
  enum class ExpertProjection { Gate, Up, Down };
  std::string router_weight() const;
  std::string expert_weight(int64_t expert, ExpertProjection projection) const;

  bool layer_slides(int64_t layer) const {
    return sliding_window > 0 && (sliding_layers.empty() || sliding_layers.at(static_cast<size_t>(layer)));
  }
  std::string torch_dtype = "float32";
  std::string json_text;  // the config.json as read, written back unchanged on save

  // Parses config.json text; refuses unsupported architectures and options by name.
  // Throws io::CheckpointError naming `source`.
  static ModelConfig from_json(const std::string& text, const std::string& source);
  static ModelConfig from_file(const std::string& path);

  int64_t num_parameters() const;
};

}  // namespace areal
