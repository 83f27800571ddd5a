#include "areal/rollout/sampling.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <mutex>
#include <stdexcept>

#include "areal/util/vector_clones.h"

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

// The key of a row's step: its generator's next 64 bits (each rank of a group holds the
// same generators and draws the same number, so the keys agree).
uint64_t step_key(at::Generator& generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

// The key's uniform draw in (0, 1).
double uniform(uint64_t key) { return (static_cast<double>(key >> 11) + 0.5) * 0x1p-53; }

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

constexpr int64_t kBlock = 256;

// sums[b] = the sum of e over columns [b * kBlock, (b + 1) * kBlock) in double: 8 lanes
// of converted floats, added in a fixed order at the end.
AREAL_VECTOR_CLONES void block_sums(const float* __restrict e, int64_t columns, double* __restrict sums) {
  typedef float Floats __attribute__((vector_size(32)));
  typedef double Doubles __attribute__((vector_size(64)));
  for (int64_t begin = 0, b = 0; begin < columns; begin += kBlock, ++b) {
    const int64_t end = std::min(columns, begin + kBlock);
    Doubles lane = {};
    int64_t i = begin;
    for (; i + 8 <= end; i += 8) {
      Floats f;
      __builtin_memcpy(&f, e + i, sizeof f);
      lane += __builtin_convertvector(f, Doubles);
    }
    double sum = ((lane[0] + lane[4]) + (lane[2] + lane[6])) + ((lane[1] + lane[5]) + (lane[3] + lane[7]));
    for (; i < end; ++i) sum += e[i];
    sums[b] = sum;
  }
}

// The draw by inverting each row's cumulative distribution: with e_i = exp(s_i - top)
// (0 for a masked token) and Z their sum over the whole vocabulary, the token is the
// first whose running sum of e passes T = u * Z, u the row's uniform. The sums are in
// double, kept by blocks of kBlock columns so that the search reads one block of e.
// In a group each rank's total is gathered and the rank whose range [P, P + L) of the
// running sum holds T (P: the lower ranks' totals) searches its columns from P: the
// same running sums as at t = 1 but for the order of the double additions (about
// 1e-16 of Z), so the token does not depend on t. Returns [rows, 3] offers for draw()
// (the owner's value 1, the others' -inf) and fills z with the rows' Z, [rows, 1].
at::Tensor cumulative_offers(const at::Tensor& scores, const at::Tensor& e, int64_t first,
                             const std::vector<uint64_t>& keys, Communicator* group, at::Tensor& z) {
  const int64_t rows = scores.size(0), columns = scores.size(1);
  const int64_t blocks = (columns + kBlock - 1) / kBlock;
  at::Tensor sums = at::empty({rows, blocks}, at::kDouble);
  const at::Tensor weights = e.contiguous();
  const float* weight = weights.data_ptr<float>();
  double* block = sums.data_ptr<double>();
  at::parallel_for(0, rows, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) block_sums(weight + r * columns, columns, block + r * blocks);
  });
  const at::Tensor totals = gather_columns(sums.sum(1, /*keepdim=*/true), group).contiguous();  // [rows, t]
  const int64_t t = totals.size(1), me = group ? group->rank() : 0;
  z = at::empty({rows, 1}, at::kDouble);
  at::Tensor offers = at::empty({rows, 3}, at::kDouble);
  const at::Tensor s = scores.contiguous();
  const float* score = s.data_ptr<float>();
  const double* total = totals.data_ptr<double>();
  double* row_z = z.data_ptr<double>();
  double* offer = offers.data_ptr<double>();
  for (int64_t r = 0; r < rows; ++r) {
    const double* rank_total = total + r * t;
    double sum = 0;
    for (int64_t j = 0; j < t; ++j) sum += rank_total[j];
    row_z[r] = sum;
    const double target = uniform(keys[r]) * sum;
    // The owner: the rank whose range holds the target; past the end (rounding) the last
    // rank with any weight.
    int64_t owner = -1;
    double below = 0, owner_below = 0;
    for (int64_t j = 0; j < t; ++j) {
      if (rank_total[j] > 0 && (owner < 0 || below <= target)) {
        owner = j;
        owner_below = below;
      }
      below += rank_total[j];
    }
    offer[3 * r] = -INFINITY;
    offer[3 * r + 1] = static_cast<double>(first);
    offer[3 * r + 2] = -INFINITY;
    if (owner != me) continue;
    const double* row_blocks = block + r * blocks;
    const float* row_e = weight + r * columns;
    double running = owner_below;
    int64_t b = 0, last = -1;
    for (; b + 1 < blocks && running + row_blocks[b] <= target; ++b) running += row_blocks[b];
    int64_t i = b * kBlock;
    const int64_t end = std::min(columns, i + kBlock);
    for (; i < end; ++i) {
      if (row_e[i] == 0) continue;
      last = i;
      running += row_e[i];
      if (running > target) break;
    }
    if (i == end) {  // rounding left the target past the sums: the last token with weight
      for (int64_t k = columns - 1; last < 0 && k >= 0; --k)
        if (row_e[k] > 0) last = k;
      i = last;
    }
    offer[3 * r] = 1;
    offer[3 * r + 1] = static_cast<double>(first + i);
    offer[3 * r + 2] = score[r * columns + i];
  }
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
    at::Tensor z;
    const at::Tensor offers = cumulative_offers(scores, (scores - top).exp_(), slice.first, keys, group, z);
    return draw(offers, top.to(at::kDouble) + z.log(), group);
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
  if (!p.greedy) {
    at::Tensor kept_z;  // of the kept tokens: the draw's, not the log-prob's
    return draw(cumulative_offers(scores, (scores - top).exp_(), slice.first, keys, group, kept_z), log_z, group);
  }
  auto [best, column] = scores.max(1, /*keepdim=*/true);
  const at::Tensor offer = at::cat({best.to(at::kDouble), (column + slice.first).to(at::kDouble),
                                    base.gather(1, column).to(at::kDouble)},
                                   1);
  return draw(offer, log_z, group);
}

}  // namespace
}  // namespace areal
