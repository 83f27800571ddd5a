// The numbers papers report for k sampled answers per prompt: pass@k (Chen et al.
// 2021's unbiased estimator), maj@k (the majority vote's answer is right) and the
// answer key a vote counts (docs/evaluation.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace areal {

// The chance that at least one of k answers drawn without replacement from n, of which
// c are right, is right: 1 - C(n - c, k) / C(n, k). Needs 1 <= k <= n, 0 <= c <= n.
double pass_at_k(int64_t n, int64_t c, int64_t k);

// The k of pass@k a report lists for n samples: 1, 2, 4, ... up to n, and n itself.
std::vector<int64_t> reported_ks(int64_t n);

// The final answer an answer's text gives, as the reward reads it: for reward_fn `math`
// the extracted final answer (\boxed{}, "####", the last number), otherwise the whole
// answer trimmed (what exact_match compares). "" when there is none (it does not vote).
std::string answer_key(const std::string& reward_fn, const std::string& text);

struct Vote {
  std::string answer;  // the winning key ("" when no answer voted)
  int64_t votes = 0;
  bool correct = false;  // the reward of the first answer with that key was > 0
};

// The majority vote over one prompt's answers: keys[i] (answer_key) with rewards[i].
// Keys that are the same answer (for `math`, equal as math_answers_equal judges; else
// the same string) vote together; a tie goes to the key that came first.
Vote majority_vote(const std::string& reward_fn, const std::vector<std::string>& keys,
                   const std::vector<double>& rewards);

}  // namespace areal
