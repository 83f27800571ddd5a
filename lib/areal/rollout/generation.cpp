#include "areal/rollout/generation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <stdexcept>

#include "areal/model/rotary.h"
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
  const int64_t cache = rows * (max_prompt + max_new_tokens) * c.num_hidden_layers * 2 *
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

// The layers' keys and values for every row of the batch, preallocated for the whole
// answer ([rows, kv_heads, capacity, head_dim] per layer) and written in place: never
// grown by concatenation, never copied out per query head. Row b holds its own tokens
// from position 0 (no left padding); lengths[b] of them are real.
struct RowCache {
  std::vector<at::Tensor> keys, values;
  std::vector<int64_t> lengths;

  RowCache(const RolloutModel& model, int64_t rows, int64_t capacity) : lengths(rows, 0) {
    const ModelConfig& c = model.config();
    const at::TensorOptions& options = model.options();
    // Zeros, not empty: attention gives a masked key weight 0, and 0 x a NaN left in
    // fresh memory would still be NaN.
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      keys.push_back(at::zeros({rows, model.local_kv_heads(), capacity, c.head_dim}, options));
      values.push_back(at::zeros({rows, model.local_kv_heads(), capacity, c.head_dim}, options));
    }
  }
  int64_t rows() const { return static_cast<int64_t>(lengths.size()); }
  int64_t bytes() const {
    int64_t total = 0;
    for (size_t i = 0; i < keys.size(); ++i) total += keys[i].nbytes() + values[i].nbytes();
    return total;
  }

  // Keeps rows `keep` (in that order), dropping the others: one copy of what stays.
  void keep_rows(const std::vector<int64_t>& keep) {
    at::Tensor index = at::tensor(keep, at::kLong).to(keys[0].device());
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i] = keys[i].index_select(0, index);
      values[i] = values[i].index_select(0, index);
    }
    std::vector<int64_t> kept;
    for (int64_t r : keep) kept.push_back(lengths[r]);
    lengths = kept;
  }

  // Rows `rows` take over `fresh`'s rows in order (keys, values, lengths); `fresh` is
  // no longer than this cache.
  void put_rows(const std::vector<int64_t>& rows, const RowCache& fresh) {
    at::Tensor index = at::tensor(rows, at::kLong).to(keys[0].device());
    const int64_t length = fresh.keys[0].size(2);
    for (size_t i = 0; i < keys.size(); ++i) {
      keys[i].narrow(2, 0, length).index_copy_(0, index, fresh.keys[i]);
      values[i].narrow(2, 0, length).index_copy_(0, index, fresh.values[i]);
    }
    for (size_t j = 0; j < rows.size(); ++j) lengths[rows[j]] = fresh.lengths[j];
  }
};

// Runs `ids` [B, T] (row b's first `counts[b]` tokens real, the rest padding) through
// the model, appending to the cache at each row's length, and returns the logits of
// each row's last real token [B, this rank's vocabulary columns]: the head runs on B
// positions only.
at::Tensor extend(RolloutModel& model, RowCache& cache, const at::Tensor& ids, const std::vector<int64_t>& counts) {
  const ModelConfig& c = model.config();
  const at::Device device = model.options().device();
  const int64_t rows = ids.size(0), length = ids.size(1);
  // Row b's token t sits at position lengths[b] + t (rotary and cache slot alike).
  at::Tensor start = at::tensor(cache.lengths, at::kLong);
  at::Tensor positions = (start.view({rows, 1}) + at::arange(length, at::kLong).view({1, length})).to(device);
  int64_t longest = 0;
  for (int64_t b = 0; b < rows; ++b) longest = std::max(longest, cache.lengths[b] + counts[b]);
  // A query attends to the keys up to its own position; its row's padding comes after
  // its last real token, so no real query sees it.
  at::Tensor key_index = at::arange(longest, at::kLong).to(device).view({1, 1, 1, longest});
  at::Tensor mask = key_index <= positions.view({rows, 1, length, 1});

  AttentionInputs attention;
  std::tie(attention.cos, attention.sin) =
      rotary_cos_sin(positions, c.head_dim, c.rope_theta, c10::typeMetaToScalarType(model.options().dtype()));
  attention.mask = mask;
  attention.cache_positions = positions;
  attention.cache_length = longest;
  at::Tensor h = model.embed(ids.to(device));
  for (size_t i = 0; i < cache.keys.size(); ++i) h = model.layer(i, h, attention, cache.keys[i], cache.values[i]);
  std::vector<int64_t> last(rows);
  for (int64_t b = 0; b < rows; ++b) {
    last[b] = counts[b] - 1;
    cache.lengths[b] += counts[b];
  }
  at::Tensor index = at::tensor(last, at::kLong).to(device).view({rows, 1, 1}).expand({rows, 1, h.size(-1)});
  at::Tensor final_hidden = h.gather(1, index);
  return model.local_logits(final_hidden).select(1, 0);
}

// Prompts `which` right-padded into one prefill of `cache`'s rows (empty so far), in
// order; returns each one's last logits [rows, this rank's vocabulary columns].
at::Tensor prefill(RolloutModel& model, RowCache& cache, const std::vector<std::vector<int64_t>>& prompts,
                   const std::vector<int64_t>& which, int64_t pad_id) {
  const int64_t rows = static_cast<int64_t>(which.size());
  int64_t longest = 0;
  for (int64_t r : which) longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[r].size()));
  at::Tensor ids = at::full({rows, longest}, pad_id, at::kLong);
  std::vector<int64_t> counts(rows);
  for (int64_t b = 0; b < rows; ++b) {
    counts[b] = static_cast<int64_t>(prompts[which[b]].size());
    ids[b].narrow(0, 0, counts[b]).copy_(at::tensor(prompts[which[b]], at::kLong));
  }
  return extend(model, cache, ids, counts);
}

}  // namespace

std::vector<Generated> generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                const SamplingParams& params, std::vector<at::Generator>& generators) {
  RolloutModel whole(model);
  return generate(whole, prompts, params, generators);
}

std::vector<Generated> generate(RolloutModel& model, const std::vector<std::vector<int64_t>>& prompts,
                                const SamplingParams& p, std::vector<at::Generator>& generators, int64_t* cache_bytes) {
  at::NoGradGuard no_grad;
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

  // `batch[i]` is the answer that row i of the cache and of `logits` belongs to. With
  // max_rows, the first max_rows answers start and the others wait for a row.
  const int64_t rows = p.max_rows > 0 ? std::min(p.max_rows, n) : n;
  std::vector<int64_t> batch(rows);
  for (int64_t r = 0; r < rows; ++r) batch[r] = r;
  int64_t next_waiting = rows;
  RowCache cache(model, rows, longest + p.max_new_tokens);
  int64_t most_cache_bytes = cache.bytes();
  at::Tensor logits = prefill(model, cache, prompts, batch, p.pad_id);

  // Decoding. A finished answer leaves the batch: its row is refilled at once from the
  // waiting answers (continuous batching); with none waiting, the cache drops finished
  // rows once a quarter of them are done (one copy of the rest), so the steps shrink
  // with the batch instead of feeding padding to the end.
  std::vector<bool> done(n, false), stopped(n, false);
  const VocabSlice vocab{{}, model.vocab_begin(), model.config().vocab_size};
  for (;;) {
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
    at::Tensor next = at::tensor(sampled.tokens, at::kLong);
    std::vector<int64_t> active, free;  // rows of this batch that go on / whose answer is done
    for (size_t i = 0; i < batch.size(); ++i) {
      const int64_t r = batch[i], token = sampled.tokens[i];
      if (!done[r]) {
        out[r].tokens.push_back(token);
        out[r].logprobs.push_back(sampled.logprobs[i]);
        stopped[r] = std::find(p.stop_ids.begin(), p.stop_ids.end(), token) != p.stop_ids.end();
        done[r] = stopped[r] || static_cast<int64_t>(out[r].tokens.size()) == p.max_new_tokens;
      }
      (done[r] ? free : active).push_back(static_cast<int64_t>(i));
    }
    if (active.empty() && next_waiting == n) break;

    if (next_waiting == n && 4 * static_cast<int64_t>(active.size()) <= 3 * cache.rows()) {
      cache.keep_rows(active);
      std::vector<int64_t> kept_batch;
      for (int64_t i : active) kept_batch.push_back(batch[i]);
      batch = kept_batch;
      next = next.index_select(0, at::tensor(active, at::kLong));
      free.clear();
    }
    // Rows whose answer is done feed padding at their own length: their cache beyond
    // the answer is never read (and a refilled row starts over).
    for (size_t i = 0; i < batch.size(); ++i)
      if (done[batch[i]]) next[static_cast<int64_t>(i)] = p.pad_id;
    std::vector<int64_t> ones(batch.size(), 1);
    logits = active.empty() ? at::zeros({cache.rows(), model.vocab_columns()}, model.options())
                            : extend(model, cache, next.unsqueeze(1), ones);

    // Refill: waiting answers take the free rows, prefilled together in a cache of
    // their own and copied in; their first logits replace the rows' decoding ones.
    std::vector<int64_t> rows_to_fill, answers;
    for (int64_t i : free) {
      if (next_waiting == n) break;
      rows_to_fill.push_back(i);
      answers.push_back(next_waiting);
      batch[i] = next_waiting++;
    }
    if (!rows_to_fill.empty()) {
      int64_t fresh_longest = 0;
      for (int64_t r : answers) fresh_longest = std::max<int64_t>(fresh_longest, static_cast<int64_t>(prompts[r].size()));
      RowCache fresh(model, static_cast<int64_t>(answers.size()), fresh_longest);
      most_cache_bytes = std::max(most_cache_bytes, cache.bytes() + fresh.bytes());
      at::Tensor first_logits = prefill(model, fresh, prompts, answers, p.pad_id);
      cache.put_rows(rows_to_fill, fresh);
      logits.index_copy_(0, at::tensor(rows_to_fill, at::kLong).to(logits.device()), first_logits);
    }
  }
  for (int64_t r = 0; r < n; ++r) out[r].truncated = !stopped[r];
  if (cache_bytes) *cache_bytes = most_cache_bytes;
  return out;
}

}  // namespace areal
