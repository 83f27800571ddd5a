// The next token of every row, sampled from vocabulary slices.
//
// In a tensor-parallel group each rank holds the logits of its own vocabulary columns.
// The group agrees on each row's token and log-prob by exchanging a few numbers per row
// (the maxima, each rank's sum of its columns' weights, the chosen token; for top-k each rank's k
// best, for top-p each rank's likeliest tokens up to top_p), never the whole
// vocabulary. At t = 1 the same code runs without a group.
//
// Sampling inverts each row's cumulative distribution: the token is the first whose
// running sum of exp(logit / temperature - max) over the kept tokens passes u x Z (Z:
// their sum), with u one uniform number the row's generator gives at each step. That is
// a draw from softmax(logit / temperature) over the kept tokens, and it depends on the
// row's seed only: not on the rank that holds a token or on the rows decoded beside it,
// and on t only through rounding (the order of the running sum's double-precision
// additions, about 1e-16 of Z, and the last bit of a few weights' exp). Nothing is sorted without top-k/top-p (RL's usual setting): one
// exp of the logits, their sums by blocks, and a search of one block per row.
#pragma once

#include <ATen/core/Generator.h>
#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"

namespace areal {

struct SamplingParams {
  bool greedy = false;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;  // 0 or >= vocab: no top-k
  int64_t max_new_tokens = 16;
  int64_t min_new_tokens = 0;
  std::vector<int64_t> stop_ids;  // end an answer (the stop token is kept in it)
  // Also ends an answer when it returns true for the answer's tokens so far, of which
  // the current turn starts at `turn_start` (0 but in episodes), called after each new
  // token once min_new_tokens are out: gconfig.stop's stop strings
  // (text/stop_strings.h). Every rank of a group decides alike from the same tokens.
  std::function<bool(const std::vector<int64_t>& answer, size_t turn_start)> stop_check;
  // An answer (an episode: the prompt and every turn) ends, truncated, when it reaches
  // this many tokens with its prompt (gconfig.max_tokens); 0: no limit.
  int64_t max_tokens = 0;
  int64_t pad_id = 0;
  // Answers decoded at once (rows of the cache); a finished answer's row is refilled from
  // the waiting ones at once (continuous batching). 0: all of them at once.
  int64_t max_rows = 0;
  // A mixture of experts: keep each token's experts in Generated::experts (routing replay).
  bool record_experts = false;
};
SamplingParams sampling_params(const GenerationConfig& g, std::vector<int64_t> stop_ids, int64_t pad_id);

// This rank's logits: columns [first, first + columns) of the vocabulary; a column at
// or past vocab_size is padding (never sampled).
struct VocabSlice {
  at::Tensor logits;  // [rows, columns] float32 on the CPU
  int64_t first = 0;
  int64_t vocab_size = 0;
};

struct NextTokens {
  std::vector<int64_t> tokens;  // per row
  std::vector<float> logprobs;  // log p(token) under softmax(logits / temperature), per row
};

// One token per row (greedy: the likeliest). `generators[r]` is row r's (unused when
// greedy); rows with `hold_stop[r]` cannot stop yet (min_new_tokens: their stop ids are
// masked, also for the log-prob). Collective over `group` (nullptr: t = 1): every rank
// passes its slice of the same rows and gets the same tokens. Non-finite logits on any
// rank throw on every rank.
NextTokens sample_next(const VocabSlice& slice, const SamplingParams& params, std::vector<at::Generator>& generators,
                       const std::vector<bool>& hold_stop, Communicator* group);

}  // namespace areal
