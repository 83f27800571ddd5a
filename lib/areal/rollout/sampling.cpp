#include "areal/rollout/sampling.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

namespace areal {

SamplingParams sampling_params(const GenerationConfig& g, std::vector<int64_t> stop_ids, int64_t pad_id) {
  SamplingParams p;
  p.greedy = g.greedy;
  p.temperature = g.temperature;
  p.top_p = g.top_p;
  p.top_k = g.top_k;
  p.max_new_tokens = g.max_new_tokens;
  p.min_new_tokens = g.min_new_tokens;
  p.max_tokens = g.max_tokens;
  p.stop_ids = std::move(stop_ids);
  for (int64_t id : g.stop_token_ids)
    if (std::find(p.stop_ids.begin(), p.stop_ids.end(), id) == p.stop_ids.end()) p.stop_ids.push_back(id);
  p.pad_id = pad_id;
  return p;
}

namespace {

inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// The uniform draw in (0, 1) of (row key, token id): the Gumbel noise's source.
inline double uniform(uint64_t row_key, uint64_t id_hash) {
  return (static_cast<double>(splitmix64(row_key ^ id_hash) >> 11) + 0.5) * 0x1p-53;
}

// The key of a row's step: its generator's next 64 bits (each rank of a group holds the
// same generators and draws the same number, so the keys agree).
uint64_t step_key(at::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

// Every rank's [rows, n] side by side: [rows, t * n], rank order (t = 1: `local`).
at::Tensor gather_columns(const at::Tensor& local, Communicator* group) {
  if (!group || group->world_size() == 1) return local;
  const int64_t t = group->world_size(), rows = local.size(0), n = local.size(1);
  at::Tensor gathered = at::empty({t, rows, n}, local.options());
  group->all_gather(local.contiguous(), gathered);
  return gathered.permute({1, 0, 2}).reshape({rows, t * n});
}

void all_reduce(at::Tensor& t, ReduceOp op, Communicator* group) {
  if (group && group->world_size() > 1) group->all_reduce(t, op);
}

// Each rank's best (score plus noise) over its kept tokens (the others at -inf) with its
// token id and score: [rows, 3] offers for draw(). The Gumbel-max draw argmax_i s_i + g_i, g_i = -log(-log u_i), is
// argmin_i E_i / e_i with E_i = -log u_i and e_i = exp(s_i - top). Since E_i >= 1 - u_i,
// a token whose 1 - u_i is at least best * e_i cannot win: its log is never taken, and
// the test can use `bound`, the vectorized exp (within 1e-5 of e_i from above once
// scaled), leaving exact keys (std::exp, the same on every rank and at every t) to the
// few candidates, about log(columns) per row. The offer's value is -key, so the largest
// wins across ranks, as for the other paths.
at::Tensor plain_offers(const at::Tensor& scores, const at::Tensor& bound, const at::Tensor& top, int64_t first,
                        const std::vector<uint64_t>& keys) {
  const int64_t rows = scores.size(0), columns = scores.size(1);
  std::vector<uint64_t> id_hash(static_cast<size_t>(columns));
  for (int64_t i = 0; i < columns; ++i) id_hash[i] = splitmix64(static_cast<uint64_t>(first + i));
  const at::Tensor s = scores.contiguous(), e = bound.contiguous(), t = top.contiguous();
  at::Tensor offers = at::empty({rows, 3}, at::kDouble);
  const float* score = s.data_ptr<float>();
  const float* approx = e.data_ptr<float>();
  const float* tops = t.data_ptr<float>();
  double* offer = offers.data_ptr<double>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = score + r * columns;
      const float* upper = approx + r * columns;
      double best = INFINITY;
      int64_t winner = -1;
      for (int64_t i = 0; i < columns; ++i) {
        if (upper[i] == 0) continue;  // masked, or too unlikely to matter (below float's range)
        const double u = uniform(keys[r], id_hash[i]);
        if (1.0 - u >= best * (upper[i] * (1.0 + 1e-5))) continue;
        const double key = -std::log(u) / std::exp(row[i] - tops[r]);
        if (key < best) {
          best = key;
          winner = i;
        }
      }
      // A rank whose columns are all masked offers nothing that can win.
      offer[3 * r] = winner < 0 ? -INFINITY : -best;
      offer[3 * r + 1] = static_cast<double>(first + std::max<int64_t>(winner, 0));
      offer[3 * r + 2] = winner < 0 ? -INFINITY : row[winner];
    }
  });
  return offers;
}

// Each row's likeliest scores of this rank in descending order, at least as many as hold
// top_p of the probability (z: the normalizer) where the rank holds that much, else all:
// a top-k of growing k (a partial selection, linear in the vocabulary) instead of a sort,
// until k would pass a quarter of the columns (then a top-k costs more than the sort).
at::Tensor likeliest(const at::Tensor& scores, const at::Tensor& top, const at::Tensor& z, double top_p) {
  const int64_t columns = scores.size(1);
  for (int64_t k = 64; 4 * k <= columns; k *= 8) {
    at::Tensor best = std::get<0>(scores.topk(k, 1));  // sorted, descending
    if (((best.to(at::kDouble) - top).exp().sum(1, /*keepdim=*/true) / z >= top_p).all().item<bool>()) return best;
  }
  return std::get<0>(scores.sort(1, /*descending=*/true));
}

// The group's best offer per row (the lowest rank, so the lowest id, on a tie): the token
// and its log-prob under the base distribution (log_z: its log-normalizer, [rows, 1]).
NextTokens draw(const at::Tensor& offer, const at::Tensor& log_z, Communicator* group) {
  const at::Tensor offers = gather_columns(offer, group);  // [rows, 3 t]
  auto o = offers.accessor<double, 2>();
  auto lz = log_z.accessor<double, 2>();
  NextTokens next;
  for (int64_t r = 0; r < offers.size(0); ++r) {
    int64_t winner = 0;
    for (int64_t j = 1; j < offers.size(1) / 3; ++j)
      if (o[r][3 * j] > o[r][3 * winner]) winner = j;
    next.tokens.push_back(static_cast<int64_t>(o[r][3 * winner + 1]));
    next.logprobs.push_back(static_cast<float>(o[r][3 * winner + 2] - lz[r][0]));
  }
  return next;
}

}  // namespace

namespace {

NextTokens sample_rows(const VocabSlice& slice, const SamplingParams& p, std::vector<at::Generator>& generators,
                       const std::vector<bool>& hold_stop, Communicator* group);

}  // namespace

NextTokens sample_next(const VocabSlice& slice, const SamplingParams& p, std::vector<at::Generator>& generators,
                       const std::vector<bool>& hold_stop, Communicator* group) {
  RECORD_FUNCTION("areal::sample_next", std::vector<c10::IValue>());  // named in profiles
  // One process: rows in chunks whose logits and work copies (a few passes each) stay in
  // the last-level cache, instead of every pass streaming all rows from memory (at a
  // 152k vocabulary, 128 rows are 78 MB a copy). Each row is sampled on its own, with its
  // own generator in row order, so the tokens do not change. A group keeps one pass of
  // collectives per step.
  constexpr int64_t kChunkBytes = 4 << 20;
  const int64_t rows = slice.logits.size(0), columns = slice.logits.size(1);
  const int64_t chunk = std::max<int64_t>(1, kChunkBytes / std::max<int64_t>(1, columns * 4));
  if ((group && group->world_size() > 1) || rows <= chunk) return sample_rows(slice, p, generators, hold_stop, group);
  NextTokens out;
  for (int64_t begin = 0; begin < rows; begin += chunk) {
    const int64_t n = std::min(chunk, rows - begin);
    VocabSlice part = slice;
    part.logits = slice.logits.narrow(0, begin, n);
    std::vector<at::Generator> part_generators;
    if (!p.greedy) part_generators.assign(generators.begin() + begin, generators.begin() + begin + n);
    const std::vector<bool> part_hold(hold_stop.begin() + begin, hold_stop.begin() + begin + n);
    NextTokens next = sample_rows(part, p, part_generators, part_hold, group);
    out.tokens.insert(out.tokens.end(), next.tokens.begin(), next.tokens.end());
    out.logprobs.insert(out.logprobs.end(), next.logprobs.begin(), next.logprobs.end());
  }
  return out;
}

namespace {

NextTokens sample_rows(const VocabSlice& slice, const SamplingParams& p, std::vector<at::Generator>& generators,
                       const std::vector<bool>& hold_stop, Communicator* group) {
  const int64_t rows = slice.logits.size(0), columns = slice.logits.size(1);
  const int64_t real = std::clamp<int64_t>(slice.vocab_size - slice.first, 0, columns);
  // Non-finite logits anywhere: NaN and +-inf reach a row's minimum or maximum.
  bool bad = false;
  at::Tensor logit_maxima;  // [rows] of the real columns
  if (real > 0) {
    const at::Tensor part = slice.logits.narrow(1, 0, real);
    logit_maxima = part.amax(1);
    bad = !(at::isfinite(part.amin(1)) & at::isfinite(logit_maxima)).all().item<bool>();
  }

  // The scores: logits / temperature, padding and held-back stop ids at -inf. Plain
  // logits with nothing to mask are used as they are (no copy), and their maxima are
  // the ones just taken.
  bool holds = false;
  for (int64_t r = 0; r < rows && !p.stop_ids.empty(); ++r) holds = holds || hold_stop[static_cast<size_t>(r)];
  const bool as_is = p.temperature == 1.0 && real == columns && !holds && slice.logits.is_contiguous();
  at::Tensor scores = as_is ? slice.logits
                            : (p.temperature == 1.0 ? slice.logits.clone(at::MemoryFormat::Contiguous)
                                                    : slice.logits / p.temperature)
                                  .contiguous();
  if (real < columns) scores.narrow(1, real, columns - real).fill_(-INFINITY);
  float* score = scores.data_ptr<float>();
  for (int64_t r = 0; r < rows && holds; ++r) {
    if (!hold_stop[static_cast<size_t>(r)]) continue;
    for (int64_t id : p.stop_ids)
      if (id >= slice.first && id < slice.first + real) score[r * columns + id - slice.first] = -INFINITY;
  }

  // The maxima (with a flag for non-finite logits anywhere) and the normalizer.
  at::Tensor maxima = at::cat({as_is ? logit_maxima : scores.amax(1), at::full({1}, bad ? 1.0f : 0.0f)});
  all_reduce(maxima, ReduceOp::Max, group);
  if (maxima[rows].item<float>() > 0)
    throw std::runtime_error("generation: the policy's logits are not finite (NaN or inf in the weights; a diverged "
                             "run? lower optimizer.lr)");
  const at::Tensor top = maxima.narrow(0, 0, rows).unsqueeze(1);
  std::vector<uint64_t> keys;
  if (!p.greedy)
    for (int64_t r = 0; r < rows; ++r) keys.push_back(step_key(generators.at(static_cast<size_t>(r))));
  const bool filtered = (p.top_k > 0 && p.top_k < slice.vocab_size) || p.top_p < 1.0;
  if (!p.greedy && !filtered) {  // plain sampling: one exp of the scores for the normalizer and the draw
    const at::Tensor e = (scores - top).exp_();
    at::Tensor z = e.sum(1, /*keepdim=*/true).to(at::kDouble);
    all_reduce(z, ReduceOp::Sum, group);
    return draw(plain_offers(scores, e, top, slice.first, keys), top.to(at::kDouble) + z.log(), group);
  }
  auto normalizer = [&](const at::Tensor& s) {  // sum of exp(s - top) over the whole vocabulary, [rows, 1]
    at::Tensor z = (s - top).exp().to(at::kDouble).sum(1, /*keepdim=*/true);
    all_reduce(z, ReduceOp::Sum, group);
    return z;
  };
  const at::Tensor log_z = top.to(at::kDouble) + normalizer(scores).log();
  const at::Tensor base = scores;  // the log-prob's distribution: no top-k, no top-p

  if (!p.greedy && p.top_k > 0 && p.top_k < slice.vocab_size) {
    // The k-th best of the whole vocabulary is among the ranks' k best.
    const int64_t k = p.top_k, mine = std::min(k, columns);
    at::Tensor best = std::get<0>(scores.topk(mine, 1));
    if (mine < k) best = at::cat({best, at::full({rows, k - mine}, -INFINITY)}, 1);
    at::Tensor kth = std::get<0>(gather_columns(best, group).topk(k, 1)).narrow(1, k - 1, 1);
    scores = scores.masked_fill(scores < kth, -INFINITY);
  }
  if (!p.greedy && p.top_p < 1.0) {
    // Keep a token when the tokens likelier than it hold less than top_p (the likeliest
    // always stays). A token kept overall is kept by that rule within its rank too, so
    // each rank offers only those: the same count m from every rank, sorted.
    const at::Tensor z = normalizer(scores);
    at::Tensor sorted = likeliest(scores, top, z, p.top_p);
    at::Tensor probs = (sorted.to(at::kDouble) - top).exp() / z;
    at::Tensor offered = ((probs.cumsum(1) - probs) < p.top_p) & (probs > 0);
    at::Tensor m = offered.sum(1).max().to(at::kDouble).reshape({1});
    all_reduce(m, ReduceOp::Max, group);
    const int64_t offers = m.item<int64_t>();  // another rank's may be more than this one selected
    if (offers > sorted.size(1)) sorted = std::get<0>(scores.topk(offers, 1));
    at::Tensor candidates = gather_columns(sorted.narrow(1, 0, offers), group);
    if (group && group->world_size() > 1) candidates = std::get<0>(candidates.sort(1, /*descending=*/true));
    at::Tensor candidate_probs = (candidates.to(at::kDouble) - top).exp() / z;
    at::Tensor kept = ((candidate_probs.cumsum(1) - candidate_probs) < p.top_p).sum(1, /*keepdim=*/true);
    at::Tensor lowest = candidates.gather(1, (kept - 1).clamp_min(0));
    scores = scores.masked_fill(scores < lowest, -INFINITY);
  }

  // The draw over the kept tokens (a kept token's score is its base score); greedy: each
  // rank's best with its id. The group's best wins, the lowest id on a tie (as argmax
  // over the whole vocabulary).
  if (!p.greedy) return draw(plain_offers(scores, (scores - top).exp_(), top, slice.first, keys), log_z, group);
  auto [best, column] = scores.max(1, /*keepdim=*/true);
  const at::Tensor offer = at::cat({best.to(at::kDouble), (column + slice.first).to(at::kDouble),
                                    base.gather(1, column).to(at::kDouble)},
                                   1);
  return draw(offer, log_z, group);
}

}  // namespace
}  // namespace areal
