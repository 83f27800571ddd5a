#include "areal/model/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "areal/io/safetensors_header.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

using io::CheckpointError;

// A boolean key; absent or null (as transformers writes unset ones) is false.
bool flag(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_boolean() && j[key].get<bool>();
}

int64_t required_int(const nlohmann::json& j, const char* key, const std::string& source) {
  if (!j.contains(key) || !j[key].is_number_integer() || j[key].get<int64_t>() <= 0)
    throw CheckpointError(cat(source, ": '", key, "' must be a positive integer"));
  return j[key].get<int64_t>();
}

// Families refused by name: the other mixture-of-experts families (shared experts,
// DeepSeek's latent attention) and vision-language models.
std::string refused_family_hint(const std::string& model_type) {
  const bool moe = model_type.find("moe") != std::string::npos || model_type.find("deepseek") != std::string::npos;
  const bool vl = model_type.find("_vl") != std::string::npos || model_type.find("vision") != std::string::npos ||
                  model_type == "llava" || model_type == "gemma3" || model_type == "mllama";
  if (moe) return "; of the mixture-of-experts families only qwen3_moe and mixtral are supported";
  if (vl) return "; vision-language models are not supported (for Gemma 3's text model: gemma3_text)";
  return "";
}

// The mixture's shape: Qwen3-MoE's num_experts (transformers 5 writes num_local_experts),
// moe_intermediate_size, norm_topk_prob, decoder_sparse_step and mlp_only_layers;
// Mixtral's num_local_experts with intermediate_size per expert, every layer sparse,
// top-k weights always renormalized.
void read_experts(ModelConfig& c, const nlohmann::json& j, const std::string& source) {
  if (c.model_type != "qwen3_moe" && c.model_type != "mixtral") return;
  const char* count_key = j.contains("num_experts") && !j["num_experts"].is_null() ? "num_experts" : "num_local_experts";
  c.num_experts = required_int(j, count_key, source);
  c.num_experts_per_tok = required_int(j, "num_experts_per_tok", source);
  if (c.num_experts_per_tok > c.num_experts)
    throw CheckpointError(cat(source, ": num_experts_per_tok (", c.num_experts_per_tok, ") is more than the ",
                              c.num_experts, " experts"));
  c.router_aux_loss_coef = j.value("router_aux_loss_coef", 0.001);
  c.output_router_logits = flag(j, "output_router_logits");
  if (c.model_type == "mixtral") {
    c.moe_intermediate_size = c.intermediate_size;
    c.norm_topk_prob = true;
    c.sparse_layers.assign(static_cast<size_t>(c.num_hidden_layers), true);
    if (j.contains("router_jitter_noise") && j["router_jitter_noise"].is_number() &&
        j["router_jitter_noise"].get<double>() != 0)
      throw CheckpointError(cat(source, ": router_jitter_noise other than 0 is not supported (mixtral)"));
    return;
  }
  c.moe_intermediate_size = required_int(j, "moe_intermediate_size", source);
  c.norm_topk_prob = flag(j, "norm_topk_prob");
  const int64_t step = j.contains("decoder_sparse_step") ? required_int(j, "decoder_sparse_step", source) : 1;
  std::vector<bool> dense(static_cast<size_t>(c.num_hidden_layers), false);
  if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array())
    for (const auto& layer : j["mlp_only_layers"]) {
      if (!layer.is_number_integer() || layer.get<int64_t>() < 0 || layer.get<int64_t>() >= c.num_hidden_layers)
        throw CheckpointError(cat(source, ": mlp_only_layers holds ", layer.dump(), ", not a layer of the ",
                                  c.num_hidden_layers));
      dense[layer.get<size_t>()] = true;
    }
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    c.sparse_layers.push_back(!dense[static_cast<size_t>(i)] && (i + 1) % step == 0);
}

}  // namespace

std::string ModelConfig::router_weight() const {
  return model_type == "mixtral" ? "block_sparse_moe.gate.weight" : "mlp.gate.weight";
}

std::string ModelConfig::expert_weight(int64_t expert, ExpertProjection projection) const {
  const bool mixtral = model_type == "mixtral";
  const char* names[3][2] = {{"gate_proj", "w1"}, {"up_proj", "w3"}, {"down_proj", "w2"}};
  return cat(mixtral ? "block_sparse_moe" : "mlp", ".experts.", expert, ".",
             names[static_cast<int>(projection)][mixtral ? 1 : 0], ".weight");
}

ModelConfig ModelConfig::from_json(const std::string& text, const std::string& source) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw CheckpointError(cat(source, ": not a JSON object"));
  ModelConfig c;
  c.json_text = text;
  c.model_type = j.value("model_type", "");
  static const std::vector<std::string> kTypes = {"qwen2",       "qwen3",     "llama",  "mistral",
                                                  "gemma2",      "gemma3_text", "qwen3_moe", "mixtral"};
  if (std::find(kTypes.begin(), kTypes.end(), c.model_type) == kTypes.end())
    throw CheckpointError(cat(source, ": model_type '", c.model_type, "' is not supported (supported: qwen2, qwen3, "
                              "llama, mistral, gemma2, gemma3_text, qwen3_moe, mixtral)",
                              refused_family_hint(c.model_type)));
  c.gemma = c.model_type == "gemma2" || c.model_type == "gemma3_text";
  auto refuse = [&](const std::string& what) {
    throw CheckpointError(cat(source, ": ", what, " is not supported (", c.model_type, ")"));
  };

  c.vocab_size = required_int(j, "vocab_size", source);
  c.hidden_size = required_int(j, "hidden_size", source);
  c.intermediate_size = required_int(j, "intermediate_size", source);
  c.num_hidden_layers = required_int(j, "num_hidden_layers", source);
  c.num_attention_heads = required_int(j, "num_attention_heads", source);
  c.num_key_value_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                              ? required_int(j, "num_key_value_heads", source)
                              : c.num_attention_heads;
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? required_int(j, "head_dim", source)
                                                                   : c.hidden_size / c.num_attention_heads;
  if (c.num_attention_heads % c.num_key_value_heads != 0)
    throw CheckpointError(cat(source, ": num_attention_heads (", c.num_attention_heads,
                              ") is not a multiple of num_key_value_heads (", c.num_key_value_heads, ")"));
  c.rms_norm_eps = j.value("rms_norm_eps", 1e-6);
  c.max_position_embeddings = j.value("max_position_embeddings", int64_t{0});
  c.tie_word_embeddings = flag(j, "tie_word_embeddings");

  // Rotary embedding: `rope_theta`, or the newer `rope_parameters` {rope_theta, rope_type}.
  // Gemma 3 keys them by layer type: full_attention (rope_theta, scaling) and
  // sliding_attention (its own base, default rope); older files: rope_local_base_freq.
  const nlohmann::json* rope = nullptr;
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object()) rope = &j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object()) rope = &j["rope_scaling"];
  if (c.model_type == "gemma3_text") {
    c.rope_theta = 1000000.0;
    c.rope_local_theta = j.value("rope_local_base_freq", 10000.0);
    if (rope && rope->contains("sliding_attention")) {
      const nlohmann::json& local = (*rope)["sliding_attention"];
      if (local.value("rope_type", "default") != "default")
        throw CheckpointError(cat(source, ": a sliding_attention rope type other than default is not supported"));
      c.rope_local_theta = local.value("rope_theta", c.rope_local_theta);
    }
    if (rope && rope->contains("full_attention")) rope = &(*rope)["full_attention"];
    else if (rope && rope->contains("sliding_attention")) rope = nullptr;
  }
  if (rope) {
    RopeScaling& r = c.rope_scaling;
    r.type = rope->value("rope_type", rope->value("type", std::string("default")));
    if (r.type != "default" && r.type != "linear" && r.type != "llama3" && r.type != "yarn" && r.type != "dynamic")
      throw CheckpointError(cat(source, ": rope type '", r.type,
                                "' is not supported (default, linear, llama3, yarn, dynamic)"));
    auto number = [&](const char* key, double fallback) {
      return rope->contains(key) && (*rope)[key].is_number() ? (*rope)[key].get<double>() : fallback;
    };
    if (rope->contains("rope_theta")) c.rope_theta = (*rope)["rope_theta"].get<double>();
    if (number("partial_rotary_factor", 1.0) != 1.0) refuse("partial_rotary_factor other than 1");
    r.original_max_position_embeddings =
        static_cast<int64_t>(number("original_max_position_embeddings", static_cast<double>(c.max_position_embeddings)));
    const bool has_factor = rope->contains("factor") && (*rope)["factor"].is_number();
    if (r.type != "default" && r.type != "yarn" && !has_factor)
      throw CheckpointError(cat(source, ": rope type '", r.type, "' needs a factor"));
    // yarn without a factor: the ratio of the context lengths (DeepSeek-V3's way).
    r.factor = has_factor ? (*rope)["factor"].get<double>()
                          : static_cast<double>(c.max_position_embeddings) /
                                static_cast<double>(std::max<int64_t>(1, r.original_max_position_embeddings));
    r.low_freq_factor = number("low_freq_factor", 1);
    r.high_freq_factor = number("high_freq_factor", 4);
    r.attention_factor = number("attention_factor", -1);
    r.beta_fast = number("beta_fast", 32);
    r.beta_slow = number("beta_slow", 1);
    r.mscale = number("mscale", 0);
    r.mscale_all_dim = number("mscale_all_dim", 0);
    r.truncate = rope->value("truncate", true);
    if (r.type == "llama3" && (r.high_freq_factor <= r.low_freq_factor || r.original_max_position_embeddings <= 0))
      throw CheckpointError(cat(source, ": rope type 'llama3' needs high_freq_factor > low_freq_factor and "
                                        "original_max_position_embeddings"));
  }
  if (j.contains("rope_theta") && j["rope_theta"].is_number()) c.rope_theta = j["rope_theta"].get<double>();

  c.hidden_act = c.gemma ? j.value("hidden_activation", j.value("hidden_act", std::string("gelu_pytorch_tanh")))
                         : j.value("hidden_act", std::string("silu"));
  if (c.hidden_act != (c.gemma ? "gelu_pytorch_tanh" : "silu")) refuse(cat("hidden_act '", c.hidden_act, "'"));
  if (flag(j, "mlp_bias")) refuse("mlp_bias=true");
  if (c.gemma) {
    auto number = [&](const char* key) { return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0; };
    c.attention_scale = 1.0 / std::sqrt(j.value("query_pre_attn_scalar", 256.0));
    c.attn_logit_softcapping = number("attn_logit_softcapping");
    c.final_logit_softcapping = number("final_logit_softcapping");
    if (flag(j, "use_bidirectional_attention")) refuse("use_bidirectional_attention=true (an embedding model)");
    // layer_types, else the older sliding_window_pattern (Gemma 3: 6) or alternation (Gemma 2).
    const int64_t pattern = j.value("sliding_window_pattern", c.model_type == "gemma2" ? int64_t{2} : int64_t{6});
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers.push_back((i + 1) % pattern != 0);
    if (j.contains("layer_types") && j["layer_types"].is_array()) {
      if (static_cast<int64_t>(j["layer_types"].size()) != c.num_hidden_layers)
        throw CheckpointError(cat(source, ": layer_types has ", j["layer_types"].size(), " entries for ",
                                  c.num_hidden_layers, " layers"));
      for (size_t i = 0; i < j["layer_types"].size(); ++i)
        c.sliding_layers[i] = j["layer_types"][i].get<std::string>() == "sliding_attention";
    }
  }
  // Sliding windows: Mistral's and Gemma's apply to every (Gemma: every sliding) layer;
  // Qwen2/3's (use_sliding_window) to the layers from max_window_layers on.
  const bool qwen = c.model_type == "qwen2" || c.model_type == "qwen3" || c.model_type == "qwen3_moe";
  const bool slides = qwen ? flag(j, "use_sliding_window") : true;
  if (slides && j.contains("sliding_window") && j["sliding_window"].is_number_integer())
    c.sliding_window = j["sliding_window"].get<int64_t>();
  if (qwen && c.sliding_window > 0) {  // layer_types, else the layers from max_window_layers on
    const int64_t first = j.value("max_window_layers", c.num_hidden_layers);
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) c.sliding_layers.push_back(i >= first);
    if (j.contains("layer_types") && j["layer_types"].is_array() &&
        static_cast<int64_t>(j["layer_types"].size()) == c.num_hidden_layers)
      for (size_t i = 0; i < j["layer_types"].size(); ++i)
        c.sliding_layers[i] = j["layer_types"][i].get<std::string>() == "sliding_attention";
    if (std::none_of(c.sliding_layers.begin(), c.sliding_layers.end(), [](bool b) { return b; })) c.sliding_window = 0;
  }
  if (j.value("pretraining_tp", 1) != 1) refuse("pretraining_tp other than 1");

  const bool attention_bias = flag(j, "attention_bias");
  c.qkv_bias = c.model_type == "qwen2" || attention_bias;
  c.o_bias = c.model_type != "qwen2" && attention_bias;
  c.qk_norm = c.model_type == "qwen3" || c.model_type == "qwen3_moe" || c.model_type == "gemma3_text";
  read_experts(c, j, source);
  if (j.contains("dtype") && j["dtype"].is_string()) c.torch_dtype = j["dtype"];
  else if (j.contains("torch_dtype") && j["torch_dtype"].is_string()) c.torch_dtype = j["torch_dtype"];
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw CheckpointError(cat(path, ": cannot read (a checkpoint needs its config.json)"));
  std::stringstream text;
  text << file.rdbuf();
  return from_json(text.str(), path);
}

int64_t ModelConfig::num_parameters() const {
  const int64_t q = num_attention_heads * head_dim, kv = num_key_value_heads * head_dim;
  int64_t attention = hidden_size * q + 2 * hidden_size * kv + q * hidden_size;
  if (qkv_bias) attention += q + 2 * kv;
  if (o_bias) attention += hidden_size;
  if (qk_norm) attention += 2 * head_dim;
  const int64_t dense_mlp = 3 * hidden_size * intermediate_size;
  const int64_t sparse_mlp = num_experts * (hidden_size + 3 * hidden_size * moe_intermediate_size);  // router + experts
  int64_t layers = 0;
  for (int64_t i = 0; i < num_hidden_layers; ++i)
    layers += attention + (layer_is_sparse(i) ? sparse_mlp : dense_mlp) + (gemma ? 4 : 2) * hidden_size;
  return vocab_size * hidden_size * (tie_word_embeddings ? 1 : 2) + layers + hidden_size;
}

}  // namespace areal
