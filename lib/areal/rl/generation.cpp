#include "areal/rl/generation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <stdexcept>

#include "areal/fsdp/save.h"
#include "areal/util/memory.h"
#include "areal/util/strings.h"

#ifdef AREAL_WITH_NCCL
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace areal {

SamplingParams sampling_params(const GenerationConfig& g, std::vector<int64_t> stop_ids, int64_t pad_id) {
  SamplingParams p;
  p.greedy = g.greedy;
  p.temperature = g.temperature;
  p.top_p = g.top_p;
  p.top_k = g.top_k;
  p.max_new_tokens = g.max_new_tokens;
  p.min_new_tokens = g.min_new_tokens;
  p.stop_ids = std::move(stop_ids);
  for (int64_t id : g.stop_token_ids)
    if (std::find(p.stop_ids.begin(), p.stop_ids.end(), id) == p.stop_ids.end()) p.stop_ids.push_back(id);
  p.pad_id = pad_id;
  return p;
}

int64_t rollout_memory_bytes(const ModelConfig& c, int64_t parameters, at::ScalarType dtype, int64_t rows, int64_t max_prompt,
                             int64_t max_new_tokens) {
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
  const int64_t weights = parameters * element;
  const int64_t cache = rows * (max_prompt + max_new_tokens) * c.num_hidden_layers * 2 * c.num_key_value_heads *
                        c.head_dim * element;
  const int64_t logits = rows * c.vocab_size * 4;
  return weights + cache + logits;
}

int64_t free_memory_bytes(const at::Device& device) {
#ifdef AREAL_WITH_NCCL
  if (device.is_cuda()) {
    c10::cuda::CUDAGuard guard(device);
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) return static_cast<int64_t>(free);
    return 0;
  }
#endif
  (void)device;
  return available_host_bytes();
}

void check_rollout_memory(const ModelConfig& config, int64_t parameters, at::ScalarType dtype, int64_t rows, int64_t max_prompt,
                          int64_t max_new_tokens, const at::Device& device) {
  const int64_t need = rollout_memory_bytes(config, parameters, dtype, rows, max_prompt, max_new_tokens);
  const int64_t free = free_memory_bytes(device);
  if (free > 0 && need > free)
    throw std::runtime_error(cat("the rollout needs ", format_bytes(need), " on ", device.str(), " (full weights in ",
                                 c10::toString(dtype), " + KV cache for ", rows, " answers of up to ",
                                 max_prompt + max_new_tokens, " tokens) but only ", format_bytes(free),
                                 " is free; lower gconfig.n_samples, train_dataset.batch_size or "
                                 "gconfig.max_new_tokens, or use more ranks"));
}

std::shared_ptr<CausalLM> gather_policy(const ShardedModel& model, Communicator& comm, at::ScalarType dtype,
                                        const at::Device& device) {
  auto policy = std::make_shared<CausalLM>(model.config(), at::TensorOptions().dtype(dtype).device(device));
  auto params = policy->named_parameters();
  at::NoGradGuard no_grad;
  for (size_t u = 0; u < model.units().size(); ++u)
    for (auto& [name, weight] : gather_unit_weights(model, comm, u, dtype, /*merge_adapters=*/true))
      params[name].copy_(weight);
  return policy;
}

at::Generator answer_generator(int64_t seed, int64_t step, int64_t prompt, int64_t sample) {
  // A splitmix-style mix, so nearby (step, prompt, sample) give unrelated streams.
  uint64_t x = static_cast<uint64_t>(seed);
  for (int64_t v : {step, prompt, sample}) {
    x ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ULL + (x << 6) + (x >> 2);
    x = (x ^ (x >> 31)) * 0xbf58476d1ce4e5b9ULL;
  }
  return at::make_generator<at::CPUGeneratorImpl>(x);
}

namespace {

// The next token of each row from its last logits [rows, vocab] (float32, CPU).
at::Tensor sample(const at::Tensor& logits, const SamplingParams& p, std::vector<at::Generator>& generators) {
  if (p.greedy) return logits.argmax(-1);
  at::Tensor scores = logits / p.temperature;
  const int64_t vocab = scores.size(-1);
  if (p.top_k > 0 && p.top_k < vocab) {
    at::Tensor kth = std::get<0>(scores.topk(p.top_k, -1)).narrow(-1, p.top_k - 1, 1);
    scores = scores.masked_fill(scores < kth, -INFINITY);
  }
  if (p.top_p < 1.0) {
    auto [sorted, order] = scores.sort(-1, /*descending=*/true);
    at::Tensor probs = sorted.softmax(-1);
    // Drop a token when the tokens before it already reach top_p (the first always stays).
    at::Tensor drop = (probs.cumsum(-1) - probs) >= p.top_p;
    scores = scores.scatter(-1, order, sorted.masked_fill(drop, -INFINITY));
  }
  at::Tensor probs = scores.softmax(-1);
  at::Tensor next = at::empty({probs.size(0)}, at::kLong);
  for (int64_t r = 0; r < probs.size(0); ++r) next[r] = at::multinomial(probs[r], 1, false, generators[r]).item<int64_t>();
  return next;
}

}  // namespace

std::vector<Generated> generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                const SamplingParams& p, std::vector<at::Generator>& generators) {
  at::NoGradGuard no_grad;
  const int64_t rows = static_cast<int64_t>(prompts.size());
  std::vector<Generated> out(rows);
  if (rows == 0) return out;
  if (!p.greedy && static_cast<int64_t>(generators.size()) != rows)
    throw std::invalid_argument(cat("generate: ", rows, " prompts but ", generators.size(), " generators"));
  const at::Device device = model.model->embed_tokens.device();

  // Left padding: every prompt ends at the same column, so one step feeds all rows.
  size_t longest = 0;
  for (const auto& prompt : prompts) longest = std::max(longest, prompt.size());
  at::Tensor ids = at::full({rows, static_cast<int64_t>(longest)}, p.pad_id, at::kLong);
  at::Tensor mask = at::zeros({rows, static_cast<int64_t>(longest)}, at::kLong);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = static_cast<int64_t>(prompts[r].size()), start = static_cast<int64_t>(longest) - n;
    ids[r].narrow(0, start, n).copy_(at::tensor(prompts[r], at::kLong));
    mask[r].narrow(0, start, n).fill_(1);
  }

  KVCache cache;
  at::Tensor logits = model.forward(ids.to(device), mask.to(device), &cache).select(1, -1);
  std::vector<bool> done(rows, false);
  at::Tensor stop_ids = at::tensor(p.stop_ids, at::kLong);
  for (int64_t step = 0; step < p.max_new_tokens; ++step) {
    at::Tensor last = logits.to(at::kFloat).cpu();
    if (!at::isfinite(last).all().item<bool>())
      throw std::runtime_error(cat("generation: the policy's logits are not finite at new token ", step + 1,
                                   " (NaN or inf in the weights; a diverged run? lower optimizer.lr)"));
    if (step < p.min_new_tokens && stop_ids.numel() > 0) last.index_fill_(-1, stop_ids, -INFINITY);
    at::Tensor next = sample(last, p, generators);
    at::Tensor logprobs = (last / p.temperature).log_softmax(-1).gather(-1, next.unsqueeze(-1)).squeeze(-1);
    at::Tensor step_mask = at::ones({rows, 1}, at::kLong);
    bool all_done = true;
    for (int64_t r = 0; r < rows; ++r) {
      if (done[r]) {
        next[r] = p.pad_id;  // finished rows feed padding that nothing attends to
        step_mask[r][0] = 0;
        continue;
      }
      const int64_t token = next[r].item<int64_t>();
      out[r].tokens.push_back(token);
      out[r].logprobs.push_back(logprobs[r].item<float>());
      if (std::find(p.stop_ids.begin(), p.stop_ids.end(), token) != p.stop_ids.end()) done[r] = true;
      all_done = all_done && done[r];
    }
    if (all_done || step + 1 == p.max_new_tokens) break;
    logits = model.forward(next.unsqueeze(1).to(device), step_mask.to(device), &cache).select(1, -1);
  }
  for (int64_t r = 0; r < rows; ++r) out[r].truncated = !done[r];
  return out;
}

}  // namespace areal
