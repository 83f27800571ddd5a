#include "areal/model/functional.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "areal/model/bfloat16_linear.h"
#include "areal/model/brgemm_attention.h"
#include "areal/model/mixed_attention.h"
#include "areal/model/packed_weights.h"
#include "areal/model/rms_norm.h"
#include "areal/model/rotary.h"
#include "areal/model/swiglu.h"
#include "areal/model/transformer.h"
#include "areal/util/strings.h"

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
  set_rotary(inputs, positions, config, dtype);
  inputs.mask = mask;
  if (attention_mask.defined()) inputs.present = present;
  if (config.sliding_window > 0)  // keys in (query - window, query], by index as transformers counts
    inputs.mask_local = mask & (query_index - key_index < config.sliding_window);
  return inputs;
}

AttentionInputs packed_attention_inputs(const ModelConfig& config, const std::vector<int64_t>& lengths,
                                        const at::Device& device, at::ScalarType dtype,
                                        const std::vector<int64_t>& prefixes) {
  if (!prefixes.empty() && prefixes.size() != lengths.size())
    throw std::invalid_argument(cat("packed_attention_inputs: ", prefixes.size(), " prefixes for ", lengths.size(),
                                    " sequences"));
  const bool continued = std::any_of(prefixes.begin(), prefixes.end(), [](int64_t p) { return p >= 0; });
  if (continued && config.rope_scaling.type == "dynamic")
    throw std::invalid_argument("packed_attention_inputs: shared prompts under dynamic NTK scaling (each whole "
                                "sequence's length sets its tables)");
  std::vector<int64_t> starts = {0};
  std::vector<at::Tensor> positions, sequence_lengths;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t prefix = prefixes.empty() ? -1 : prefixes[i];
    if (prefix >= static_cast<int64_t>(i) || (prefix >= 0 && prefixes[static_cast<size_t>(prefix)] >= 0))
      throw std::invalid_argument(cat("packed_attention_inputs: sequence ", i, " continues sequence ", prefix,
                                      ", which is not an earlier sequence of its own"));
    const int64_t first = prefix >= 0 ? lengths[static_cast<size_t>(prefix)] : 0;
    starts.push_back(starts.back() + lengths[i]);
    positions.push_back(at::arange(first, first + lengths[i], at::kLong));
    sequence_lengths.push_back(at::full({lengths[i]}, first + lengths[i], at::kLong));
  }
  AttentionInputs inputs;
  set_rotary(inputs, at::cat(positions).view({1, -1}).to(device), config, dtype,
             at::cat(sequence_lengths).view({1, -1}));
  inputs.sequence_starts = at::tensor(starts, at::kLong);
  if (continued) inputs.sequence_prefixes = at::tensor(prefixes, at::kLong);
  return inputs;
}

void set_rotary(AttentionInputs& inputs, const at::Tensor& positions, const ModelConfig& config, at::ScalarType dtype,
                const at::Tensor& sequence_lengths) {
  std::tie(inputs.cos, inputs.sin) = rotary_cos_sin(positions, config, dtype, sequence_lengths);
  if (config.rope_local_theta > 0) {
    ModelConfig local = config;
    local.rope_theta = config.rope_local_theta;
    local.rope_scaling = RopeScaling{};
    std::tie(inputs.cos_local, inputs.sin_local) = rotary_cos_sin(positions, local, dtype);
  }
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  if (fuses_rms_norm(x, weight)) return fused_rms_norm(x, weight, eps, /*gemma=*/false);
  // As transformers does: normalize in float32, scale in the input dtype.
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return weight * normed.to(x.scalar_type());
}

at::Tensor model_norm(const ModelConfig& c, const at::Tensor& x, const at::Tensor& weight) {
  if (!c.gemma) return rms_norm(x, weight, c.rms_norm_eps);
  if (fuses_rms_norm(x, weight)) return fused_rms_norm(x, weight, c.rms_norm_eps, /*gemma=*/true);
  at::Tensor x32 = x.to(at::kFloat);
  at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + c.rms_norm_eps);
  return (normed * (1.0 + weight.to(at::kFloat))).to(x.scalar_type());
}

at::Tensor scale_embeddings(const ModelConfig& c, const at::Tensor& embedded) {
  if (!c.gemma) return embedded;
  return embedded * at::scalar_tensor(std::sqrt(static_cast<double>(c.hidden_size)), embedded.options());
}

at::Tensor embed_tokens(const ModelConfig& c, const at::Tensor& weight, const at::Tensor& ids) {
  return scale_embeddings(c, at::embedding(weight, ids));
}

// On the CPU torch's bfloat16 flash-attention backward costs 2-3x its float32 one on short
// sequences (about even at 192 keys, faster beyond; docs/training.md, "Precision"): a
// forward that will be back-propagated over fewer keys keeps float32's precision inside:
// packed rows on the matrix units (brgemm_attention.h) or with a float32 backward
// (mixed_attention.h); with a mask, forward and backward in float32. float16 alike.
static bool backward_in_float32(const at::Tensor& q, const at::Tensor& k) {
  constexpr int64_t kFloatBelowKeys = 192;
  return q.device().is_cpu() && (q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kHalf) &&
         k.size(2) < kFloatBelowKeys && at::GradMode::is_enabled() && q.requires_grad();
}

at::Tensor attend(const ModelConfig& c, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& mask, bool causal, int64_t window) {
  if (causal && window > 0 && k.size(2) > window) {  // causal within the window: an explicit mask
    const int64_t t = q.size(2), s = k.size(2);
    const at::Tensor query = at::arange(s - t, s, q.options().dtype(at::kLong)).view({t, 1});
    const at::Tensor key = at::arange(s, q.options().dtype(at::kLong)).view({1, s});
    at::Tensor windowed = ((key <= query) & (query - key < window)).view({1, 1, t, s});
    return attend(c, q, k, v, mask.defined() ? mask & windowed : windowed, /*causal=*/false);
  }
  const bool gqa = q.size(1) != k.size(1);
  const std::optional<double> scale = c.attention_scale > 0 ? std::optional<double>(c.attention_scale) : std::nullopt;
  if (c.attn_logit_softcapping <= 0) {
    const std::optional<at::Tensor> allowed = mask.defined() ? std::optional<at::Tensor>(mask) : std::nullopt;
    if (backward_in_float32(q, k)) {
      if (causal && !mask.defined())  // packed rows
        return brgemm_attention_runs(q, k, v) ? brgemm_attention(q, k, v, scale) : mixed_precision_attention(q, k, v, scale);
      return at::scaled_dot_product_attention(q.to(at::kFloat), k.to(at::kFloat), v.to(at::kFloat), allowed, 0.0,
                                              causal, scale, gqa)
          .to(q.scalar_type());
    }
    return at::scaled_dot_product_attention(q, k, v, allowed, 0.0, causal, scale, gqa);
  }
  // Soft-capped scores: SDPA cannot, so as transformers' eager attention.
  const int64_t group = q.size(1) / k.size(1);
  const at::Tensor keys = group > 1 ? k.repeat_interleave(group, 1) : k;
  const at::Tensor vals = group > 1 ? v.repeat_interleave(group, 1) : v;
  const double cap = c.attn_logit_softcapping;
  at::Tensor scores = at::matmul(q, keys.transpose(2, 3)) * scale.value_or(1.0 / std::sqrt(double(q.size(3))));
  scores = at::tanh(scores / cap) * cap;
  at::Tensor allowed = mask;
  if (causal) {
    const int64_t t = q.size(2), s = k.size(2);
    at::Tensor tri = at::ones({t, s}, q.options().dtype(at::kBool)).tril(s - t);
    allowed = allowed.defined() ? allowed & tri : tri;
  }
  if (allowed.defined()) scores = scores.masked_fill(allowed.logical_not(), -std::numeric_limits<double>::infinity());
  at::Tensor probs = at::softmax(scores, -1, at::kFloat).to(q.scalar_type());
  return at::matmul(probs, vals);
}

ExpertRouting route_tokens(const ModelConfig& c, const at::Tensor& router_weight, const at::Tensor& tokens,
                           const at::Tensor& replay) {
  ExpertRouting r;
  r.logits = at::linear(tokens, router_weight);
  const at::Tensor probabilities = at::softmax(r.logits, -1, at::kFloat);
  std::tie(r.weights, r.experts) = probabilities.topk(c.num_experts_per_tok, -1);
  r.used = r.experts;
  if (replay.defined()) {  // the recorded rows' experts, weighted by this router's probabilities there
    const at::Tensor recorded = replay.to(r.experts.device(), at::kLong);
    const at::Tensor has = (recorded.select(1, 0) >= 0).unsqueeze(1);
    r.used = at::where(has, recorded, r.experts);
    r.weights = probabilities.gather(1, r.used);
  }
  if (c.norm_topk_prob) r.weights = r.weights / r.weights.sum(-1, /*keepdim=*/true);
  // transformers: Qwen3-MoE weighs the experts' outputs in the compute dtype, Mixtral in float32.
  if (c.model_type != "mixtral") r.weights = r.weights.to(r.logits.scalar_type());
  return r;
}

namespace {

RouterTally tally_router(const ModelConfig& c, const at::Tensor& logits, const at::Tensor& present) {
  const at::Tensor probs = at::softmax(logits, -1);  // in the logits' dtype, as transformers' loss
  const at::Tensor chosen = std::get<1>(probs.topk(c.num_experts_per_tok, -1)).reshape({-1});
  const at::Tensor real = present.defined() ? present.reshape({-1}).to(probs.device(), at::kFloat)
                                            : at::ones({logits.size(0)}, probs.options().dtype(at::kFloat));
  RouterTally t;
  t.probability_sum = (probs.to(at::kFloat) * real.unsqueeze(1)).sum(0);
  t.choice_counts = at::zeros({c.num_experts}, real.options())
                        .scatter_add_(0, chosen, real.repeat_interleave(c.num_experts_per_tok));
  t.tokens = real.sum();
  return t;
}

}  // namespace

at::Tensor load_balancing_loss(const ModelConfig& c, const std::vector<RouterTally>& tallies) {
  at::Tensor counts = tallies.at(0).choice_counts, probabilities = tallies[0].probability_sum, tokens = tallies[0].tokens;
  for (size_t l = 1; l < tallies.size(); ++l) {
    counts = counts + tallies[l].choice_counts;
    probabilities = probabilities + tallies[l].probability_sum;
    tokens = tokens + tallies[l].tokens;
  }
  return (counts / tokens * (probabilities / tokens)).sum() * static_cast<double>(c.num_experts);
}

namespace {

using ExpertLinear = std::function<at::Tensor(const at::Tensor&, const std::string&)>;

// Expert `e`'s MLP on its rows (SwiGLU, as transformers).
at::Tensor run_expert(const ModelConfig& c, int64_t e, const at::Tensor& in, const ExpertLinear& linear) {
  using P = ModelConfig::ExpertProjection;
  auto name = [](const std::string& weight) { return weight.substr(0, weight.size() - std::string(".weight").size()); };
  return linear(at::silu(linear(in, name(c.expert_weight(e, P::Gate)))) * linear(in, name(c.expert_weight(e, P::Up))),
                name(c.expert_weight(e, P::Down)));
}

// Expert parallelism: the rows `sent` (sorted by expert, count[e] of expert e) go to the
// ranks that hold their experts; each rank runs its experts over the rows of every rank
// of its group (each expert's rows in one product per projection) and sends the outputs
// back, which arrive in `sent`'s order.
at::Tensor through_parallel_experts(const ModelConfig& c, const ExpertParallel& p, const at::Tensor& sent,
                                    const int64_t* count, const ExpertLinear& linear) {
  const int64_t local = c.num_experts / p.ranks, first = p.rank * local;
  std::vector<int64_t> send_rows(p.ranks, 0), recv_rows(p.ranks, 0);
  for (int64_t e = 0; e < c.num_experts; ++e) send_rows[e / local] += count[e];
  // received[s * local + l]: the rows rank s sends for this rank's expert l (in that order).
  const std::vector<int64_t> received =
      p.exchange_counts(std::vector<int64_t>(count, count + c.num_experts), local);
  for (int64_t s = 0; s < p.ranks; ++s)
    for (int64_t l = 0; l < local; ++l) recv_rows[s] += received[s * local + l];
  const at::Tensor rows = p.exchange(sent, send_rows, recv_rows);
  // The received rows regrouped by expert: expert l's from every source in turn. Rank s's
  // rows for expert l start at first_row[s * local + l] (sources in order, experts in order).
  std::vector<int64_t> first_row(received.size()), by_expert, expert_rows(local, 0);
  for (size_t i = 0, at = 0; i < received.size(); at += static_cast<size_t>(received[i]), ++i)
    first_row[i] = static_cast<int64_t>(at);
  by_expert.reserve(rows.size(0));
  for (int64_t l = 0; l < local; ++l)
    for (int64_t s = 0; s < p.ranks; ++s) {
      const int64_t n = received[s * local + l];
      for (int64_t i = 0; i < n; ++i) by_expert.push_back(first_row[s * local + l] + i);
      expert_rows[l] += n;
    }
  const at::Tensor index = at::tensor(by_expert, at::kLong).to(rows.device());
  const at::Tensor grouped = rows.index_select(0, index);
  std::vector<at::Tensor> outputs;
  for (int64_t l = 0, begin = 0; l < local; begin += expert_rows[l], ++l)
    if (expert_rows[l] > 0) outputs.push_back(run_expert(c, first + l, grouped.narrow(0, begin, expert_rows[l]), linear));
  const at::Tensor out = outputs.empty() ? at::zeros({0, sent.size(1)}, sent.options()) : at::cat(outputs);
  return p.exchange(out.index_select(0, at::argsort(index)), recv_rows, send_rows);
}

}  // namespace

at::Tensor expert_mixture(const ModelConfig& c, const LayerWeights& w, const at::Tensor& x, const ExpertLinear& linear,
                          RouterTally* router, const at::Tensor& present, ExpertChoices* choices,
                          const ExpertParallel* parallel) {
  const at::Tensor tokens = x.reshape({-1, x.size(-1)});
  const ExpertRouting routing =
      route_tokens(c, w(c.router_weight()), tokens, choices ? choices->replay : at::Tensor());
  if (router) *router = tally_router(c, routing.logits, present);
  if (choices) choices->chosen = routing.experts;
  // The (token, choice) pairs sorted by expert: each expert's tokens are one contiguous
  // run, gathered once and computed as one product per projection.
  const int64_t k = c.num_experts_per_tok;
  const at::Tensor pairs = routing.used.reshape({-1});
  const at::Tensor order = at::argsort(pairs, /*stable=*/true, /*dim=*/0);
  const at::Tensor token_of = order.div(k, "floor");
  const at::Tensor weight_of = routing.weights.reshape({-1}).index_select(0, order);
  const at::Tensor counts = at::bincount(pairs, {}, c.num_experts).to(at::kCPU);
  const int64_t* count = counts.data_ptr<int64_t>();
  at::Tensor unsorted;  // each expert's weighted outputs back in (token, choice) order
  if (parallel && parallel->ranks > 1 && parallel->exchange) {
    const at::Tensor out = through_parallel_experts(c, *parallel, tokens.index_select(0, token_of), count, linear);
    unsorted = (out * weight_of.unsqueeze(1)).index_select(0, at::argsort(order));
  } else {
    // Without a graph the outputs go straight to their rows (one pass); with one, a
    // concatenation reordered once, whose backward is two passes (in-place row copies
    // would cost autograd a copy of the whole buffer per expert). The same values either way.
    // Experts whole on a generation group's ranks (`parallel` without an exchange): this
    // rank's experts only, the other rows 0 (partial sums).
    const bool partial = parallel && parallel->ranks > 1;
    const int64_t per_rank = c.num_experts / (partial ? parallel->ranks : 1), first = partial ? parallel->rank * per_rank : 0;
    const bool graph = at::GradMode::is_enabled() && !partial;
    if (partial)
      unsorted = at::zeros({pairs.size(0), tokens.size(1)},
                           tokens.options().dtype(at::promote_types(tokens.scalar_type(), weight_of.scalar_type())));
    std::vector<at::Tensor> outputs;  // with a graph: in the sorted order
    int64_t begin = 0;
    for (int64_t e = 0; e < c.num_experts; begin += count[e], ++e) {
      if (count[e] == 0 || e < first || e >= first + per_rank) continue;
      const at::Tensor in = tokens.index_select(0, token_of.narrow(0, begin, count[e]));
      at::Tensor out = run_expert(c, e, in, linear) * weight_of.narrow(0, begin, count[e]).unsqueeze(1);
      if (graph) {
        outputs.push_back(std::move(out));
        continue;
      }
      if (!unsorted.defined()) unsorted = at::empty({pairs.size(0), tokens.size(1)}, out.options());
      unsorted.index_copy_(0, order.narrow(0, begin, count[e]), out);
    }
    if (graph) unsorted = at::cat(outputs).index_select(0, at::argsort(order));
  }
  // Summed over the choices in one reduction (float32 accumulation for bfloat16, the
  // same order on every device), as transformers sums them.
  return unsorted.view({tokens.size(0), k, tokens.size(1)}).sum(1).to(x.scalar_type()).view(x.sizes());
}

namespace {

// Attention over a packed row [1, heads, T, hd] (AttentionInputs::sequence_starts and
// sequence_prefixes): each sequence causally within itself, one that continues a shared
// prompt over prompt + itself. The sequences (each with its prompt in front) are gathered
// into padded batches of similar lengths, one SDPA call each, instead of one call per
// sequence: right padding never reaches a real query under the causal mask, and the
// gathers' backward sums a shared prompt's key and value gradients over its answers.
// A prompt's own outputs come from its first answer's row.
at::Tensor packed_attention(const ModelConfig& c, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& sequence_starts, const at::Tensor& sequence_prefixes, int64_t window) {
  const int64_t* starts = sequence_starts.data_ptr<int64_t>();
  const int64_t* prefixes = sequence_prefixes.defined() ? sequence_prefixes.data_ptr<int64_t>() : nullptr;
  const int64_t n = sequence_starts.numel() - 1, total = starts[n];
  auto length = [&](int64_t i) { return starts[i + 1] - starts[i]; };
  // Attention rows: (prefix or -1, sequence); a prompt that an answer continues has none of its own.
  std::vector<std::pair<int64_t, int64_t>> rows;
  std::vector<bool> continued(static_cast<size_t>(n), false);
  for (int64_t i = 0; i < n; ++i)
    if (prefixes && prefixes[i] >= 0) continued[static_cast<size_t>(prefixes[i])] = true;
  for (int64_t i = 0; i < n; ++i)
    if (!continued[static_cast<size_t>(i)]) rows.push_back({prefixes ? prefixes[i] : -1, i});
  auto row_length = [&](const std::pair<int64_t, int64_t>& r) { return (r.first >= 0 ? length(r.first) : 0) + length(r.second); };
  // Longest first; a batch ends where a row is under 3/4 of its first (padding stays small).
  std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return row_length(a) > row_length(b); });
  std::vector<int64_t> back(static_cast<size_t>(total), -1);  // each token's place in the batches' outputs
  std::vector<at::Tensor> outputs;
  const at::Tensor qt = q.transpose(1, 2).squeeze(0), kt = k.transpose(1, 2).squeeze(0), vt = v.transpose(1, 2).squeeze(0);
  int64_t produced = 0;  // output rows before this batch's
  for (size_t first = 0; first < rows.size();) {
    const int64_t width = row_length(rows[first]);
    size_t end = first + 1;
    while (end < rows.size() && 4 * row_length(rows[end]) >= 3 * width) ++end;
    std::vector<int64_t> gather;  // [rows, width] token positions, padded with the row's last
    gather.reserve((end - first) * static_cast<size_t>(width));
    for (size_t r = first; r < end; ++r) {
      const auto [prefix, sequence] = rows[r];
      const int64_t base = produced + static_cast<int64_t>(r - first) * width;
      int64_t column = 0;
      auto take = [&](int64_t i, bool outputs_here) {
        for (int64_t t = starts[i]; t < starts[i + 1]; ++t, ++column) {
          gather.push_back(t);
          if (outputs_here && back[static_cast<size_t>(t)] < 0) back[static_cast<size_t>(t)] = base + column;
        }
      };
      if (prefix >= 0) take(prefix, /*outputs_here=*/true);  // kept from the first answer's row only
      take(sequence, true);
      while (column++ < width) gather.push_back(gather.back());
    }
    const int64_t batch = static_cast<int64_t>(end - first);
    const at::Tensor index = at::tensor(gather, at::kLong).to(q.device());
    auto batched = [&](const at::Tensor& x) {  // [T, heads, hd] -> [batch, heads, width, hd]
      return x.index_select(0, index).view({batch, width, x.size(1), x.size(2)}).transpose(1, 2);
    };
    const at::Tensor out = attend(c, batched(qt), batched(kt), batched(vt), {}, /*causal=*/true, window);
    outputs.push_back(out.transpose(1, 2).reshape({batch * width, q.size(1), q.size(3)}));
    produced += batch * width;
    first = end;
  }
  const at::Tensor all = outputs.size() == 1 ? outputs[0] : at::cat(outputs);
  return all.index_select(0, at::tensor(back, at::kLong).to(q.device())).unsqueeze(0).transpose(1, 2);
}

}  // namespace

at::Tensor decoder_layer(const ModelConfig& c, int64_t layer, const LayerWeights& w, const at::Tensor& x,
                         const AttentionInputs& attention, at::Tensor& keys, at::Tensor& values, double lora_scale,
                         const PartialSumReduce& reduce, RouterTally* router, ExpertChoices* choices,
                         const LayerParallel& parallel) {
  const int64_t batch = x.size(0), length = x.size(1);
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, head_dim = c.head_dim;
  auto linear = [&](const at::Tensor& in, const std::string& name) {
    const at::Tensor weight = w(name + ".weight"), bias = w(name + ".bias");
    at::Tensor out = bfloat16_linear_applies(in, weight) ? bfloat16_linear(in, weight, bias)
                                                         : linear_product(in, weight, bias);
    if (at::Tensor a = w(name + ".lora_A.weight"); a.defined())
      out = out + at::linear(at::linear(in, a), w(name + ".lora_B.weight")) * lora_scale;
    return out;
  };

  const TensorParallel* tensor = parallel.tensor;
  at::Tensor h = model_norm(c, x, w("input_layernorm.weight"));
  if (tensor) h = tensor->enter(h);
  // q, k and v as one product where the weights hold them fused (the rollout's,
  // rollout_model.h), its columns split.
  const at::Tensor qkv = w("self_attn.qkv_proj.weight").defined() ? linear(h, "self_attn.qkv_proj") : at::Tensor();
  auto projection = [&](const char* name, int64_t first, int64_t count) {
    const at::Tensor out = qkv.defined() ? qkv.narrow(-1, first * head_dim, count * head_dim) : linear(h, name);
    return out.view({batch, length, count, head_dim});
  };
  at::Tensor q = projection("self_attn.q_proj", 0, heads);
  at::Tensor k = projection("self_attn.k_proj", heads, kv_heads);
  at::Tensor v = projection("self_attn.v_proj", heads + kv_heads, kv_heads).transpose(1, 2);
  if (c.qk_norm) {  // Qwen3 and Gemma 3 normalize each head before the rotation
    q = model_norm(c, q, w("self_attn.q_norm.weight"));
    k = model_norm(c, k, w("self_attn.k_norm.weight"));
  }
  const bool local = attention.cos_local.defined() && !c.sliding_layers.empty() && c.sliding_layers.at(layer);
  const int64_t window = c.layer_slides(layer) ? c.sliding_window : 0;
  const ContextParallel* context = parallel.context && parallel.context->ranks > 1 ? parallel.context : nullptr;
  if (context && (attention.cached || (!attention.sequence_starts.defined() && !attention.mask.defined())))
    throw std::invalid_argument("decoder_layer: context parallelism takes padded rows with a mask or packed rows (no cache)");
  // With context parallelism this rank's tokens are chunk `rank` of the sequence: their rotary rows.
  auto mine = [&](const at::Tensor& table) { return context ? table.narrow(1, context->rank * length, length) : table; };
  const at::Tensor cos = mine(local ? attention.cos_local : attention.cos);
  const at::Tensor sin = mine(local ? attention.sin_local : attention.sin);
  q = apply_rotary(q.transpose(1, 2), cos, sin);
  k = apply_rotary(k.transpose(1, 2), cos, sin);
  // Grouped-query attention: each key/value head serves heads / kv_heads query heads;
  // attention reads the shared heads in place (enable_gqa) instead of copies per query head.
  auto packed = [&](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
    return packed_attention(c, q, k, v, attention.sequence_starts, attention.sequence_prefixes, window);
  };
  at::Tensor attended;
  if (attention.cached) {
    attended = attention.cached(q, k, v);
  } else if (context) {  // Ulysses: the whole sequence for this rank's share of the heads, and back
    // Fewer key/value heads than ranks: each is repeated for the ranks whose query heads share it.
    auto shared = [&](const at::Tensor& t) {
      return kv_heads < context->ranks ? t.repeat_interleave(context->ranks / kv_heads, 1) : t;
    };
    const at::Tensor q_all = context->to_heads(q), k_all = context->to_heads(shared(k)), v_all = context->to_heads(shared(v));
    const bool windowed = window > 0 && attention.mask_local.defined();
    attended = context->to_tokens(attention.sequence_starts.defined()
                                      ? packed(q_all, k_all, v_all)
                                      : attend(c, q_all, k_all, v_all,
                                               windowed ? attention.mask_local : attention.mask, /*causal=*/false));
  } else if (attention.sequence_starts.defined()) {
    attended = packed(q, k, v);
  } else {
    keys = keys.defined() ? at::cat({keys, k}, 2) : k;
    values = values.defined() ? at::cat({values, v}, 2) : v;
    const bool windowed = window > 0 && attention.mask_local.defined();
    attended = attend(c, q, keys, values, windowed ? attention.mask_local : attention.mask, /*causal=*/false);
  }
  at::Tensor attention_out = linear(attended.transpose(1, 2).reshape({batch, length, heads * head_dim}), "self_attn.o_proj");
  if (reduce) reduce(attention_out);
  // Gemma normalizes the attention's and the MLP's outputs too, and names the MLP's input
  // norm pre_feedforward_layernorm (LLaMA's post_attention_layernorm is that input norm).
  if (c.gemma) attention_out = model_norm(c, attention_out, w("post_attention_layernorm.weight"));
  at::Tensor after_attention = x + attention_out;

  at::Tensor m = model_norm(c, after_attention, w(c.gemma ? "pre_feedforward_layernorm.weight"
                                                           : "post_attention_layernorm.weight"));
  if (tensor) m = tensor->enter(m);
  at::Tensor mlp;
  if (c.layer_is_sparse(layer)) {
    mlp = expert_mixture(c, w, m, linear, router, attention.present, choices, parallel.experts);
  } else {
    at::Tensor gate, up, gated;
    if (w("mlp.gate_up_proj.weight").defined()) {  // fused as q, k and v above
      const at::Tensor both = linear(m, "mlp.gate_up_proj");
      if (!c.gemma && fuses_swiglu(both)) {
        gated = swiglu(both);  // generation on the CPU: one pass
      } else {
        gate = both.narrow(-1, 0, both.size(-1) / 2);
        up = both.narrow(-1, both.size(-1) / 2, both.size(-1) / 2);
      }
    } else {
      gate = linear(m, "mlp.gate_proj");
      up = linear(m, "mlp.up_proj");
    }
    if (!gated.defined()) gated = (c.gemma ? at::gelu(gate, "tanh") : at::silu(gate)) * up;
    mlp = linear(gated, "mlp.down_proj");
  }
  if (reduce) reduce(mlp);
  if (c.gemma) mlp = model_norm(c, mlp, w("post_feedforward_layernorm.weight"));
  return after_attention + mlp;
}

at::Tensor lm_logits(const ModelConfig& c, const at::Tensor& norm_weight, const at::Tensor& head_weight,
                     const at::Tensor& hidden, const TensorParallel* tensor) {
  at::Tensor normed = model_norm(c, hidden, norm_weight);
  if (tensor) normed = tensor->enter(normed);
  at::Tensor logits = linear_product(normed, head_weight);
  if (c.final_logit_softcapping > 0)
    logits = at::tanh(logits / c.final_logit_softcapping) * c.final_logit_softcapping;
  return logits;
}

}  // namespace areal
