#include "areal/model/builtin_model.h"

namespace areal {

std::string builtin_tiny_config_json() {
  return R"({
  "architectures": ["Qwen2ForCausalLM"],
  "model_type": "qwen2",
  "vocab_size": 258,
  "hidden_size": 128,
  "intermediate_size": 352,
  "num_hidden_layers": 4,
  "num_attention_heads": 4,
  "num_key_value_heads": 2,
  "max_position_embeddings": 512,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "tie_word_embeddings": true,
  "hidden_act": "silu",
  "bos_token_id": 256,
  "eos_token_id": 257,
  "torch_dtype": "float32"
}
)";
}

}  // namespace areal
