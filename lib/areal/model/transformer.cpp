#include "areal/model/transformer.h"

#include <ATen/ATen.h>

#include "areal/util/strings.h"

namespace areal {
namespace {

// A submodule that only holds parameters (a Linear, an RMSNorm): `name.weight`, `name.bias`.
std::shared_ptr<torch::nn::Module> holder(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

// A parameter at a dotted path inside `root` ("mlp.experts.3.up_proj.weight"), its holders
// made on the way (or found, when an earlier path made them).
void parameter_at(torch::nn::Module& root, const std::string& path, const at::Tensor& value) {
  torch::nn::Module* module = &root;
  size_t begin = 0;
  for (size_t dot = path.find('.'); dot != std::string::npos; begin = dot + 1, dot = path.find('.', begin)) {
    const std::string name = path.substr(begin, dot - begin);
    const auto* existing = module->named_children().find(name);
    module = existing ? existing->get() : holder(*module, name).get();
  }
  module->register_parameter(path.substr(begin), value);
}

}  // namespace

DecoderLayer::DecoderLayer(const ModelConfig& c, int64_t index, const at::TensorOptions& options)
    : config_(c), index_(index) {
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  auto linear = [&](torch::nn::Module& parent, const std::string& name, int64_t in, int64_t out, bool bias) {
    auto m = holder(parent, name);
    m->register_parameter("weight", at::empty({out, in}, options));
    if (bias) m->register_parameter("bias", at::empty({out}, options));
  };
  auto norm = [&](torch::nn::Module& parent, const std::string& name, int64_t dim) {  // Gemma's scales by 1 + w
    holder(parent, name)->register_parameter("weight", c.gemma ? at::zeros({dim}, options) : at::ones({dim}, options));
  };
  norm(*this, "input_layernorm", c.hidden_size);
  auto attention = holder(*this, "self_attn");
  linear(*attention, "q_proj", c.hidden_size, q, c.qkv_bias);
  linear(*attention, "k_proj", c.hidden_size, kv, c.qkv_bias);
  linear(*attention, "v_proj", c.hidden_size, kv, c.qkv_bias);
  linear(*attention, "o_proj", q, c.hidden_size, c.o_bias);
  if (c.qk_norm) {
    norm(*attention, "q_norm", c.head_dim);
    norm(*attention, "k_norm", c.head_dim);
  }
  norm(*this, "post_attention_layernorm", c.hidden_size);
  if (c.gemma) {
    norm(*this, "pre_feedforward_layernorm", c.hidden_size);
    norm(*this, "post_feedforward_layernorm", c.hidden_size);
  }
  if (c.layer_is_sparse(index)) {  // the router and one MLP per expert, by the Hub's names (ModelConfig's)
    using P = ModelConfig::ExpertProjection;
    const int64_t width = c.moe_intermediate_size, hidden = c.hidden_size;
    parameter_at(*this, c.router_weight(), at::empty({c.num_experts, hidden}, options));
    for (int64_t e = 0; e < c.num_experts; ++e) {
      parameter_at(*this, c.expert_weight(e, P::Gate), at::empty({width, hidden}, options));
      parameter_at(*this, c.expert_weight(e, P::Down), at::empty({hidden, width}, options));
      parameter_at(*this, c.expert_weight(e, P::Up), at::empty({width, hidden}, options));
    }
  } else {
    auto mlp = holder(*this, "mlp");
    linear(*mlp, "gate_proj", c.hidden_size, c.intermediate_size, false);
    linear(*mlp, "up_proj", c.hidden_size, c.intermediate_size, false);
    linear(*mlp, "down_proj", c.intermediate_size, c.hidden_size, false);
  }
  for (const auto& item : named_parameters()) weights_[item.key()] = item.value();
}

at::Tensor DecoderLayer::forward(const at::Tensor& x, const AttentionInputs& attention, at::Tensor& keys,
                                 at::Tensor& values, RouterTally* router, ExpertChoices* choices) {
  auto lookup = [this](const std::string& name) {
    auto it = weights_.find(name);
    return it == weights_.end() ? at::Tensor() : it->second;
  };
  return decoder_layer(config_, index_, lookup, x, attention, keys, values, 0.0, {}, router, choices);
}

DecoderStack::DecoderStack(const ModelConfig& c, const at::TensorOptions& options) {
  embed_tokens = holder(*this, "embed_tokens")->register_parameter("weight", at::empty({c.vocab_size, c.hidden_size}, options));
  auto list = holder(*this, "layers");
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers.push_back(list->register_module(std::to_string(i), std::make_shared<DecoderLayer>(c, i, options)));
  norm = holder(*this, "norm")->register_parameter(
      "weight", c.gemma ? at::zeros({c.hidden_size}, options) : at::ones({c.hidden_size}, options));
}

CausalLM::CausalLM(const ModelConfig& config, const at::TensorOptions& options) : config_(config) {
  model = register_module("model", std::make_shared<DecoderStack>(config_, options));
  if (!config_.tie_word_embeddings)
    lm_head = holder(*this, "lm_head")->register_parameter("weight", at::empty({config_.vocab_size, config_.hidden_size}, options));
}

at::Tensor CausalLM::forward(const at::Tensor& input_ids, const at::Tensor& attention_mask, KVCache* cache,
                             std::vector<RouterTally>* routers, std::vector<ExpertChoices>* choices) {
  at::Tensor h = embed_tokens(config_, model->embed_tokens, input_ids);
  AttentionInputs attention = attention_inputs(config_, input_ids, attention_mask, cache, h.scalar_type());
  if (cache && cache->keys.empty()) {
    cache->keys.resize(model->layers.size());
    cache->values.resize(model->layers.size());
  }
  if (choices && choices->empty()) choices->resize(static_cast<size_t>(config_.sparse_layer_count()));
  for (size_t i = 0, sparse = 0; i < model->layers.size(); ++i) {
    at::Tensor keys = cache ? cache->keys[i] : at::Tensor();
    at::Tensor values = cache ? cache->values[i] : at::Tensor();
    RouterTally tally;
    const bool is_sparse = config_.layer_is_sparse(static_cast<int64_t>(i));
    const bool tallied = routers && is_sparse;
    ExpertChoices* layer_choices = choices && is_sparse ? &choices->at(sparse) : nullptr;
    sparse += is_sparse;
    h = model->layers[i]->forward(h, attention, keys, values, tallied ? &tally : nullptr, layer_choices);
    if (tallied) routers->push_back(tally);
    if (cache) {
      cache->keys[i] = keys;
      cache->values[i] = values;
    }
  }
  return lm_logits(config_, model->norm, lm_head.defined() ? lm_head : model->embed_tokens, h);
}

}  // namespace areal
