// A decoder-only model's shape, read from a Hugging Face config.json.
#pragma once

#include <cstdint>
#include <string>

namespace areal {

// Rotary scaling as transformers' rope_parameters (or the older rope_scaling) name it:
// "default", "linear" (positions divided by factor), "llama3" (Llama 3.1+: low
// frequencies divided by factor, a smooth ramp between) or "yarn" (NTK-by-parts with an
// attention factor on cos and sin). rotary.h turns it into frequencies.
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
  std::string model_type;  // "qwen2", "qwen3", "llama" or "mistral"
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
  // Tokens a query attends back to in some layers (Mistral's sliding_window, Qwen2's
  // use_sliding_window); 0: none. Not implemented: within it attention is the full one,
  // so the job checks accept only sequences that fit (job_inputs.cpp).
  int64_t sliding_window = 0;
  std::string torch_dtype = "float32";
  std::string json_text;  // the config.json as read, written back unchanged on save

  // Parses config.json text; refuses unsupported architectures and options by name.
  // Throws io::CheckpointError naming `source`.
  static ModelConfig from_json(const std::string& text, const std::string& source);
  static ModelConfig from_file(const std::string& path);

  int64_t num_parameters() const;
};

}  // namespace areal
