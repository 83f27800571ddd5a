#include "areal/rollout/generation.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "areal/model/packed_weights.h"
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
                             int64_t max_new_tokens, int64_t tensor_parallel, bool packed_weights) {
  const int64_t element = static_cast<int64_t>(c10::elementSize(dtype)), t = tensor_parallel;
  // This rank's slices, plus the unit being sliced (gathered in float32 when LoRA is merged),
  // plus a tied head's packed copy beside the embedding.
  const int64_t tied_copy = packed_weights && c.tie_word_embeddings ? (c.vocab_size + t - 1) / t * c.hidden_size : 0;
  const int64_t weights = ((parameters + t - 1) / t + tied_copy) * element + largest_unit_parameters(c) * (4 + element);
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
  const int64_t need = rollout_memory_bytes(config, parameters, dtype, rows, max_prompt, max_new_tokens, tensor_parallel,
                                            packs_weights(device, dtype));
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
// positions only. `experts`, when given: the routers' choices [B, T, sparse layers, k]
// (int16, on the CPU).
at::Tensor extend(RolloutModel& model, PagedKvCache& cache, const at::Tensor& ids, const std::vector<int64_t>& rows,
                  const std::vector<int64_t>& counts, at::Tensor* experts = nullptr) {
  const ModelConfig& c = model.config();
  const at::Device device = model.options().device();
  const int64_t batch = ids.size(0);
  const CacheStep step = cache.begin(rows, counts, ids.size(1));
  AttentionInputs attention;
  set_rotary(attention, step.positions, c, c10::typeMetaToScalarType(model.options().dtype()));
  at::Tensor h = model.embed(ids.to(device));
  std::vector<at::Tensor> chosen;  // each sparse layer's [B x T, k]
  for (size_t i = 0; i < static_cast<size_t>(c.num_hidden_layers); ++i) {
    attention.cached = [&cache, &step, i](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
      return cache.attend(i, step, q, k, v);
    };
    ExpertChoices choices;
    const bool record = experts && c.layer_is_sparse(static_cast<int64_t>(i));
    h = model.layer(i, h, attention, record ? &choices : nullptr);
    if (record) chosen.push_back(choices.chosen);
  }
  if (experts)  // one copy to the host per step, beside the logits'
    *experts = at::stack(chosen, 1).view({batch, ids.size(1), -1}).to(at::kShort).cpu();
  std::vector<int64_t> last(batch);
  for (int64_t b = 0; b < batch; ++b) last[b] = counts[b] - 1;
  at::Tensor index = at::tensor(last, at::kLong).to(device).view({batch, 1, 1}).expand({batch, 1, h.size(-1)});
  return model.local_logits(h.gather(1, index)).select(1, 0);
}

// Answers `answers` take new rows at the end of the cache, their prompts right-padded
// into one prefill; returns each one's first logits [rows, this rank's vocabulary
// columns] (and the prompts' experts, as extend). Answers to the same prompt (a group's
// samples) share its prefill: the first one's row runs it, the others' rows get copies
// of its keys and values, and all get its logits.
at::Tensor start_answers(RolloutModel& model, PagedKvCache& cache, const std::vector<std::vector<int64_t>>& prompts,
                         const std::vector<int64_t>& answers, int64_t pad_id, std::vector<int64_t>& counts,
                         at::Tensor* experts) {
  const int64_t n = static_cast<int64_t>(answers.size()), first_row = cache.rows();
  std::map<std::vector<int64_t>, int64_t> prefill_of;  // prompt -> its index among the prefilled
  std::vector<int64_t> prefilled, which(n);            // answers whose rows run a prefill; each answer's
  std::vector<int64_t> copied_from, copied_to;         // cache rows that get a prefilled row's copy
  counts.assign(n, 0);
  int64_t longest = 0;
  for (int64_t b = 0; b < n; ++b) {
    const std::vector<int64_t>& prompt = prompts[answers[b]];
    counts[b] = static_cast<int64_t>(prompt.size());
    const auto [it, fresh] = prefill_of.emplace(prompt, static_cast<int64_t>(prefilled.size()));
    which[b] = it->second;
    if (fresh) {
      prefilled.push_back(b);
      longest = std::max(longest, counts[b]);
    } else {
      copied_from.push_back(first_row + prefilled[it->second]);
      copied_to.push_back(first_row + b);
    }
  }
  const int64_t unique = static_cast<int64_t>(prefilled.size());
  at::Tensor ids = at::full({unique, longest}, pad_id, at::kLong);
  std::vector<int64_t> rows(unique), unique_counts(unique);
  for (int64_t u = 0; u < unique; ++u) {
    rows[u] = first_row + prefilled[u];
    unique_counts[u] = counts[prefilled[u]];
    ids[u].narrow(0, 0, unique_counts[u]).copy_(at::tensor(prompts[answers[prefilled[u]]], at::kLong));
  }
  cache.add_rows(n);
  at::Tensor logits = extend(model, cache, ids, rows, unique_counts, experts);
  if (unique == n) return logits;
  cache.copy_rows(copied_from, copied_to);
  const at::Tensor index = at::tensor(which, at::kLong);
  if (experts) *experts = experts->index_select(0, index);
  return logits.index_select(0, index.to(logits.device()));
}

}  // namespace

std::vector<Generated> generate(CausalLM& model, const std::vector<std::vector<int64_t>>& prompts,
                                const SamplingParams& params, std::vector<at::Generator>& generators) {
  RolloutModel whole(model);
  return generate(whole, prompts, params, generators);
}

std::vector<Generated> generate(RolloutModel& model, const std::vector<std::vector<int64_t>>& prompts,
                                const SamplingParams& p, std::vector<at::Generator>& generators, int64_t* cache_bytes,
                                const WeightCheck& weight_check, const EpisodeHooks& episodes) {
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
  source.episodes = episodes;
  const int64_t max_rows = p.max_rows > 0 ? std::min(p.max_rows, n) : n;
  const int64_t used = generate_stream(model, p, longest, max_rows, source, weight_check);
  if (cache_bytes) *cache_bytes = used;
  return out;
}

int64_t generate_stream(RolloutModel& model, const SamplingParams& p, int64_t longest_prompt, int64_t max_rows,
                        PromptSource& source, const WeightCheck& weight_check) {
  at::NoGradGuard no_grad;
  const bool episodes = static_cast<bool>(source.episodes);
  if (episodes && (!source.episodes.replies || p.max_tokens <= 0))
    throw std::invalid_argument("generate: episodes need a replies hook and SamplingParams::max_tokens");
  // A row's room: its prompt and answer, or an episode's every turn (gconfig.max_tokens).
  int64_t capacity = longest_prompt + p.max_new_tokens;
  if (p.max_tokens > 0) capacity = episodes ? p.max_tokens : std::min(capacity, p.max_tokens);
  PagedKvCache cache(model, max_rows, capacity);
  // By answer id (the order answers start in): its prompt until it starts, its sampler,
  // its answer until it finishes, its prompt's length and where its current turn starts.
  std::vector<std::vector<int64_t>> prompts;
  std::vector<at::Generator> generators;
  std::vector<Generated> out;
  std::vector<int64_t> prompt_length, turn_start;
  // `batch[i]` is the answer that row i of the cache belongs to; `waiting[i]`: the row's
  // episode waits for its environment (its cache kept, not decoding).
  std::vector<int64_t> batch;
  std::vector<bool> waiting;
  int64_t waiting_rows = 0;
  // The experts of a step's tokens [B, T, ...] (extend) onto answers[b]'s first counts[b].
  at::Tensor step_experts;
  at::Tensor* const record = p.record_experts && model.config().num_experts > 0 ? &step_experts : nullptr;
  auto keep_experts = [&](const std::vector<int64_t>& answers, const std::vector<int64_t>& counts) {
    if (!record) return;
    const int64_t per_token = step_experts.size(2);
    const int16_t* data = step_experts.data_ptr<int16_t>();  // contiguous: a fresh host copy
    for (size_t b = 0; b < answers.size(); ++b) {
      const int16_t* row = data + static_cast<int64_t>(b) * step_experts.size(1) * per_token;
      std::vector<int16_t>& kept = out[answers[b]].experts;
      kept.insert(kept.end(), row, row + counts[b] * per_token);
    }
  };
  auto start_new = [&](int64_t room, std::vector<int64_t>& rows) {  // up to `room` new answers take rows
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
      prompt_length.push_back(static_cast<int64_t>(prompt.size()));
      turn_start.push_back(0);
      prompts.push_back(std::move(prompt));
      generators.push_back(generator);
      out.emplace_back();
    }
    if (ids.empty()) return at::Tensor();
    for (int64_t id : ids) {
      rows.push_back(static_cast<int64_t>(batch.size()));
      batch.push_back(id);
      waiting.push_back(false);
    }
    std::vector<int64_t> counts;
    at::Tensor first = start_answers(model, cache, prompts, ids, p.pad_id, counts, record);
    keep_experts(ids, counts);
    for (int64_t id : ids) std::vector<int64_t>().swap(prompts[id]);  // started: the cache has it
    return first;
  };
  // The version of the weights that made `logits` (0 without a weight check).
  int64_t logits_version = weight_check ? weight_check() : 0;
  // `logits` row k belongs to cache row logit_rows[k].
  std::vector<int64_t> logit_rows;
  at::Tensor logits = start_new(max_rows, logit_rows);

  // Decoding. A finished answer leaves the batch at once and its blocks go back to the
  // pool (no other row's cache moves); a new answer from the source takes the free row
  // at once (continuous batching), so the batch stays full while the source has prompts.
  // An episode's row waiting for its environment keeps its cache and skips the steps.
  const VocabSlice vocab{{}, model.vocab_begin(), model.config().vocab_size};
  bool wait_for_reply = false;
  for (;;) {
    std::vector<int64_t> decode_rows, decode_tokens;  // rows that go on, and their tokens
    std::vector<bool> drop(batch.size(), false);
    if (logits.defined()) {
      // This rank's vocabulary columns of the step: the step's one wait for the device.
      VocabSlice slice = vocab;
      slice.logits = logits.to(at::kFloat).cpu();
      std::vector<at::Generator> row_generators;
      std::vector<bool> hold_stop;
      for (const int64_t row : logit_rows) {
        const int64_t r = batch[row];
        hold_stop.push_back(static_cast<int64_t>(out[r].tokens.size()) - turn_start[r] < p.min_new_tokens);
        if (!p.greedy) row_generators.push_back(generators[r]);
      }
      const NextTokens sampled = sample_next(slice, p, row_generators, hold_stop, model.group());
      for (size_t i = 0; i < logit_rows.size(); ++i) {
        const int64_t row = logit_rows[i], r = batch[row], token = sampled.tokens[i];
        Generated& a = out[r];
        a.tokens.push_back(token);
        a.logprobs.push_back(sampled.logprobs[i]);
        if (weight_check) a.versions.push_back(logits_version);
        if (episodes) a.model_tokens.push_back(1);
        const int64_t turn_tokens = static_cast<int64_t>(a.tokens.size()) - turn_start[r];
        const bool may_stop = turn_tokens > p.min_new_tokens;
        const bool stopped =
            std::find(p.stop_ids.begin(), p.stop_ids.end(), token) != p.stop_ids.end() ||
            (may_stop && p.stop_check && p.stop_check(a.tokens, static_cast<size_t>(turn_start[r])));
        const bool full = prompt_length[r] + static_cast<int64_t>(a.tokens.size()) >= capacity;
        if (!stopped && !full && turn_tokens < p.max_new_tokens) {
          decode_rows.push_back(row);
          decode_tokens.push_back(token);
          continue;
        }
        a.truncated = !stopped;
        if (episodes) {  // the row waits for the environment, its cache kept
          waiting[row] = true;
          ++waiting_rows;
          source.episodes.turn_ended(r, a);
          continue;
        }
        generators[r] = at::Generator();
        source.finished(r, std::move(a));
        drop[row] = true;
      }
    }
    logits = at::Tensor();
    logit_rows.clear();
    // Environments' replies: an ended episode leaves; a continued one appends the
    // environment's tokens (one prefill of the waiting rows that go on).
    std::vector<int64_t> resume_rows;
    std::vector<std::vector<int64_t>> resume_tokens;
    auto take_replies = [&](bool wait) {
      std::vector<int64_t> row_of(out.size(), -1);
      for (size_t row = 0; row < batch.size(); ++row) row_of[batch[row]] = static_cast<int64_t>(row);
      for (TurnReply& reply : source.episodes.replies(wait)) {
        const int64_t row = reply.id >= 0 && reply.id < static_cast<int64_t>(out.size()) ? row_of[reply.id] : -1;
        if (row < 0 || !waiting[row]) throw std::logic_error(cat("generate: a reply for episode ", reply.id,
                                                                 ", which does not wait for one"));
        waiting[row] = false;
        --waiting_rows;
        Generated& a = out[reply.id];
        if (reply.end) {
          generators[reply.id] = at::Generator();
          source.finished(reply.id, std::move(a));
          drop[row] = true;
          continue;
        }
        if (reply.tokens.empty() ||
            prompt_length[reply.id] + static_cast<int64_t>(a.tokens.size() + reply.tokens.size()) >= capacity)
          throw std::logic_error(cat("generate: episode ", reply.id, " continues with ", reply.tokens.size(),
                                     " tokens, which do not leave room for a turn in its row of ", capacity));
        // The turn's last token was sampled but never run: it goes into the cache with
        // the environment's tokens.
        reply.tokens.insert(reply.tokens.begin(), a.tokens.back());
        a.tokens.insert(a.tokens.end(), reply.tokens.begin() + 1, reply.tokens.end());
        const size_t added = reply.tokens.size() - 1;
        a.logprobs.insert(a.logprobs.end(), added, 0.0f);
        if (weight_check) a.versions.insert(a.versions.end(), added, -1);
        a.model_tokens.insert(a.model_tokens.end(), added, 0);
        a.truncated = false;
        turn_start[reply.id] = static_cast<int64_t>(a.tokens.size());
        resume_rows.push_back(row);
        resume_tokens.push_back(std::move(reply.tokens));
      }
    };
    if (waiting_rows > 0) take_replies(wait_for_reply);
    wait_for_reply = false;
    // Finished rows leave the cache; the others keep their order.
    if (std::find(drop.begin(), drop.end(), true) != drop.end()) {
      std::vector<int64_t> keep, new_index(batch.size(), -1), kept_batch;
      std::vector<bool> kept_waiting;
      for (size_t row = 0; row < batch.size(); ++row) {
        if (drop[row]) continue;
        new_index[row] = static_cast<int64_t>(keep.size());
        keep.push_back(static_cast<int64_t>(row));
        kept_batch.push_back(batch[row]);
        kept_waiting.push_back(waiting[row]);
      }
      cache.keep_rows(keep);
      batch = std::move(kept_batch);
      waiting = std::move(kept_waiting);
      for (int64_t& row : decode_rows) row = new_index[row];
      for (int64_t& row : resume_rows) row = new_index[row];
    }
    if (weight_check) logits_version = weight_check();
    std::vector<at::Tensor> parts;
    auto answers_of = [&](const std::vector<int64_t>& rows) {
      std::vector<int64_t> answers;
      for (int64_t row : rows) answers.push_back(batch[row]);
      return answers;
    };
    if (!decode_rows.empty()) {
      const std::vector<int64_t> ones(decode_rows.size(), 1);
      parts.push_back(extend(model, cache, at::tensor(decode_tokens, at::kLong).unsqueeze(1), decode_rows, ones, record));
      keep_experts(answers_of(decode_rows), ones);
      logit_rows.insert(logit_rows.end(), decode_rows.begin(), decode_rows.end());
    }
    if (!resume_rows.empty()) {
      size_t width = 0;
      for (const auto& t : resume_tokens) width = std::max(width, t.size());
      at::Tensor ids = at::full({static_cast<int64_t>(resume_rows.size()), static_cast<int64_t>(width)}, p.pad_id,
                                at::kLong);
      std::vector<int64_t> counts;
      for (size_t k = 0; k < resume_rows.size(); ++k) {
        counts.push_back(static_cast<int64_t>(resume_tokens[k].size()));
        ids[static_cast<int64_t>(k)].narrow(0, 0, counts.back()).copy_(at::tensor(resume_tokens[k], at::kLong));
      }
      parts.push_back(extend(model, cache, ids, resume_rows, counts, record));
      keep_experts(answers_of(resume_rows), counts);
      logit_rows.insert(logit_rows.end(), resume_rows.begin(), resume_rows.end());
    }
    // Refill: new answers take the free rows, prefilled together; their first logits
    // follow the others'.
    if (const int64_t room = max_rows - cache.rows(); room > 0) {
      at::Tensor first = start_new(room, logit_rows);
      if (first.defined()) parts.push_back(first);
    }
    if (!parts.empty()) {
      logits = parts.size() == 1 ? parts[0] : at::cat(parts);
      continue;
    }
    if (waiting_rows == 0) break;  // nothing runs, nothing waits: every answer is out
    // Every row waits for its environment: the next pass waits for a reply.
    wait_for_reply = true;
  }
  return cache.bytes();
}

}  // namespace areal
