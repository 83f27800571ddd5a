#include "areal/rollout/generation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <stdexcept>

#include "areal/model/rotary.h"
#include "areal/rollout/paged_kv_cache.h"
#include "areal/util/memory.h"
#include "areal/util/strings.h"

#ifdef AREAL_WITH_NCCL
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace areal {

int64_t largest_unit_parameters(const ModelConfig& c) {
  const int64_t embedding = c.vocab_size * c.hidden_size;
  const int64_t layer = (c.num_parameters() - embedding * (c.tie_word_embeddings ? 1 : 2) - c.hidden_size) /
                        std::max<int64_t>(1, c.num_hidden_layers);
  return std::max(layer, embedding + c.hidden_size);
}

int64_t rollout_memory_bytes(const ModelConfig& c, int64_t parameters, at::ScalarType dtype, int64_t rows, int64_t max_prompt,
                             int64_t max_new_tokens, int64_t tensor_parallel) {
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype)), t = tensor_parallel;
  // This rank's slices, plus the unit being sliced (gathered in float32 when LoRA is merged).
  const int64_t weights = (parameters + t - 1) / t * element + largest_unit_parameters(c) * (4 + element);
  const int64_t block = PagedKvCache::kBlockTokens;
  const int64_t cache = rows * ((max_prompt + max_new_tokens + block - 1) / block * block) * c.num_hidden_layers * 2 *
                        tensor_parallel_kv_heads(c, t) * c.head_dim * element;
  // A step's logits of this rank's vocabulary columns in dtype, and sampling's float32
  // and float64 work on them (top-p sorts them).
  const int64_t logits = rows * ((c.vocab_size + t - 1) / t) * (element + 40);
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
                          int64_t max_new_tokens, int64_t tensor_parallel, const at::Device& device) {
  const int64_t need = rollout_memory_bytes(config, parameters, dtype, rows, max_prompt, max_new_tokens, tensor_parallel);
  const int64_t free = free_memory_bytes(device);
  if (free > 0 && need > free)
    throw std::runtime_error(cat("the rollout needs ", format_bytes(need), " on ", device.str(), " (weights / ",
                                 tensor_parallel, " in ", c10::toString(dtype), " + one unit + KV cache / ",
                                 tensor_parallel, " for ", rows, " answers of up to ", max_prompt + max_new_tokens,
                                 " tokens) but only ", format_bytes(free),
                                 " is free; lower gconfig.n_samples, train_dataset.batch_size or "
                                 "gconfig.max_new_tokens, or generate with more tensor-parallel ranks "
                                 "(rollout.backend: areal:dDtT, docs/rl.md)"));
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

// Runs `ids` [B, T] (row b's first `counts[b]` tokens real, the rest padding) through
// the model as tokens appended to cache rows `rows`, and returns the logits of each
// row's last real token [B, this rank's vocabulary columns]: the head runs on B
// positions only.
at::Tensor extend(RolloutModel& model, PagedKvCache& cache, const at::Tensor& ids, const std::vector<int64_t>& rows,
                  const std::vector<int64_t>& counts) {
  const ModelConfig& c = model.config();
  const at::Device device = model.options().device();
  const int64_t batch = ids.size(0);
  const CacheStep step = cache.begin(rows, counts, ids.size(1));
  AttentionInputs attention;
  set_rotary(attention, step.positions, c, c10::typeMetaToScalarType(model.options().dtype()));
  at::Tensor h = model.embed(ids.to(device));
  for (size_t i = 0; i < static_cast<size_t>(c.num_hidden_layers); ++i) {
    attention.cached = [&cache, &step, i](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return cache.attend(i, step, q, k, v);
    };
    h = model.layer(i, h, attention);
  }
  std::vector<int64_t> last(batch);
  for (int64_t b = 0; b < batch; ++b) last[b] = counts[b] - 1;
  at::Tensor index = at::tensor(last, at::kLong).to(device).view({batch, 1, 1}).expand({batch, 1, h.size(-1)});
  return model.local_logits(h.gather(1, index)).select(1, 0);
}

// Answers `answers` take new rows at the end of the cache, their prompts right-padded
// into one prefill; returns each one's first logits [rows, this rank's vocabulary
// columns].
at::Tensor start_answers(RolloutModel& model, PagedKvCache& cache, const std::vector<std::vector<int64_t>>& prompts,
                         const std::vector<int64_t>& answers, int64_t pad_id) {
  const int64_t n = static_cast<int64_t>(answers.size());
  int64_t longest = 0;
  for (int64_t a : answers) longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[a].size()));
  at::Tensor ids = at::full({n, longest}, pad_id, at::kLong);
  std::vector<int64_t> rows(n), counts(n);
  for (int64_t b = 0; b < n; ++b) {
    rows[b] = cache.rows() + b;
    counts[b] = static_cast<int64_t>(prompts[answers[b]].size());
    ids[b].narrow(0, 0, counts[b]).copy_(at::tensor(prompts[answers[b]], at::kLong));
  }
  cache.add_rows(n);
  return extend(model, cache, ids, rows, counts);
}

}  // namespace

std::vector<Generated> generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                const SamplingParams& params, std::vector<at::Generator>& generators) {
  RolloutModel whole(model);
  return generate(whole, prompts, params, generators);
}

std::vector<Generated> generate(RolloutModel& model, const std::vector<std::vector<int64_t>>& prompts,
                                const SamplingParams& p, std::vector<at::Generator>& generators, int64_t* cache_bytes,
                                const WeightCheck& weight_check) {
  const int64_t n = static_cast<int64_t>(prompts.size());
  std::vector<Generated> out(n);
  if (n == 0) return out;
  if (!p.greedy && static_cast<int64_t>(generators.size()) != n)
    throw std::invalid_argument(cat("generate: ", n, " prompts but ", generators.size(), " generators"));
  int64_t longest = 0;
  for (int64_t r = 0; r < n; ++r) {
    if (prompts[r].empty()) throw std::invalid_argument(cat("generate: prompt ", r, " is empty"));
    longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[r].size()));
  }
  // The prompts in order; answer r is the r-th started, so its id is r.
  int64_t next = 0;
  PromptSource source;
  source.next = [&](std::vector<int64_t>& prompt, at::Generator& generator) {
    if (next == n) return false;
    prompt = prompts[next];
    if (!p.greedy) generator = generators[next];
    ++next;
    return true;
  };
  source.finished = [&](int64_t id, Generated answer) { out[id] = std::move(answer); };
  const int64_t max_rows = p.max_rows > 0 ? std::min(p.max_rows, n) : n;
  const int64_t used = generate_stream(model, p, longest, max_rows, source, weight_check);
  if (cache_bytes) *cache_bytes = used;
  return out;
}

int64_t generate_stream(RolloutModel& model, const SamplingParams& p, int64_t longest_prompt, int64_t max_rows,
                        PromptSource& source, const WeightCheck& weight_check) {
  at::NoGradGuard no_grad;
  PagedKvCache cache(model, max_rows, longest_prompt + p.max_new_tokens);
  // By answer id (the order answers start in): its prompt until it starts, its sampler,
  // its answer until it finishes.
  std::vector<std::vector<int64_t>> prompts;
  std::vector<at::Generator> generators;
  std::vector<Generated> out;
  // `batch[i]` is the answer that row i of the cache and of `logits` belongs to.
  std::vector<int64_t> batch;
  auto start_new = [&](int64_t room) {  // up to `room` new answers from the source take rows
    std::vector<int64_t> ids;
    for (int64_t k = 0; k < room; ++k) {
      std::vector<int64_t> prompt;
      at::Generator generator;
      if (!source.next(prompt, generator)) break;
      if (prompt.empty() || static_cast<int64_t>(prompt.size()) > longest_prompt)
        throw std::invalid_argument(cat("generate: a prompt of ", prompt.size(), " tokens (at most ", longest_prompt,
                                        ", and not empty)"));
      if (!p.greedy && !generator.defined()) throw std::invalid_argument("generate: a sampled answer needs a generator");
      ids.push_back(static_cast<int64_t>(out.size()));
      prompts.push_back(std::move(prompt));
      generators.push_back(generator);
      out.emplace_back();
    }
    if (ids.empty()) return at::Tensor();
    batch.insert(batch.end(), ids.begin(), ids.end());
    at::Tensor first = start_answers(model, cache, prompts, ids, p.pad_id);
    for (int64_t id : ids) std::vector<int64_t>().swap(prompts[id]);  // started: the cache has it
    return first;
  };
  // The version of the weights that made `logits` (0 without a weight check).
  int64_t logits_version = weight_check ? weight_check() : 0;
  at::Tensor logits = start_new(max_rows);

  // Decoding. A finished answer leaves the batch at once and its blocks go back to the
  // pool (no other row's cache moves); a new answer from the source takes the free row
  // at once (continuous batching), so the batch stays full while the source has prompts.
  const VocabSlice vocab{{}, model.vocab_begin(), model.config().vocab_size};
  while (logits.defined()) {
    // This rank's vocabulary columns of the step: the step's one wait for the device.
    VocabSlice slice = vocab;
    slice.logits = logits.to(at::kFloat).cpu();
    std::vector<at::Generator> row_generators;
    std::vector<bool> hold_stop;
    for (const int64_t r : batch) {
      hold_stop.push_back(static_cast<int64_t>(out[r].tokens.size()) < p.min_new_tokens);
      if (!p.greedy) row_generators.push_back(generators[r]);
    }
    const NextTokens sampled = sample_next(slice, p, row_generators, hold_stop, model.group());
    std::vector<int64_t> active, active_batch, next;  // rows that go on, their answers and tokens
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t r = batch[i], token = sampled.tokens[i];
      out[r].tokens.push_back(token);
      out[r].logprobs.push_back(sampled.logprobs[i]);
      if (weight_check) out[r].versions.push_back(logits_version);
      const bool may_stop = static_cast<int64_t>(out[r].tokens.size()) > p.min_new_tokens;
      const bool stopped = std::find(p.stop_ids.begin(), p.stop_ids.end(), token) != p.stop_ids.end() ||
                           (may_stop && p.stop_check && p.stop_check(out[r].tokens));
      if (stopped || static_cast<int64_t>(out[r].tokens.size()) == p.max_new_tokens) {
        out[r].truncated = !stopped;
        generators[r] = at::Generator();
        source.finished(r, std::move(out[r]));
        continue;
      }
      active.push_back(static_cast<int64_t>(i));
      active_batch.push_back(r);
      next.push_back(token);
    }
    if (active.size() < batch.size()) cache.keep_rows(active);
    batch = active_batch;
    logits = at::Tensor();
    if (weight_check) logits_version = weight_check();
    if (!active.empty()) {
      std::vector<int64_t> rows(active.size()), ones(active.size(), 1);
      for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
      logits = extend(model, cache, at::tensor(next, at::kLong).unsqueeze(1), rows, ones);
    }
    // Refill: new answers take the free rows, prefilled together; their first logits
    // follow the decoding rows'.
    if (const int64_t room = max_rows - cache.rows(); room > 0) {
      at::Tensor first = start_new(room);
      if (first.defined()) logits = logits.defined() ? at::cat({logits, first}) : first;
    }
  }
  return cache.bytes();
}

}  // namespace areal
