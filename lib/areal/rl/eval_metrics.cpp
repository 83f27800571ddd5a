#include "areal/rl/eval_metrics.h"

#include <stdexcept>

#include "areal/reward/reward.h"
#include "areal/util/strings.h"

namespace areal {

double pass_at_k(int64_t n, int64_t c, int64_t k) {
  if (k < 1 || k > n || c < 0 || c > n)
    throw std::invalid_argument(cat("pass_at_k: needs 1 <= k <= n and 0 <= c <= n (n = ", n, ", c = ", c, ", k = ", k, ")"));
  if (n - c < k) return 1.0;  // every draw of k holds a right answer
  // C(n - c, k) / C(n, k) as a product of k ratios: no factorial overflows.
  double all_wrong = 1.0;
  for (int64_t i = n - c + 1; i <= n; ++i) all_wrong *= 1.0 - static_cast<double>(k) / static_cast<double>(i);
  return 1.0 - all_wrong;
}

std::vector<int64_t> reported_ks(int64_t n) {
  std::vector<int64_t> ks;
  for (int64_t k = 1; k < n; k *= 2) ks.push_back(k);
  ks.push_back(n);
  return ks;
}

std::string answer_key(const std::string& reward_fn, const std::string& text) {
  if (reward_fn == "math") return trim(extract_math_answer(text).value_or(""));
  return trim(text);
}

Vote majority_vote(const std::string& reward_fn, const std::vector<std::string>& keys,
                   const std::vector<double>& rewards) {
  if (keys.size() != rewards.size()) throw std::invalid_argument("majority_vote: one reward per key");
  const bool math = reward_fn == "math";
  struct Group {
    size_t first;  // its first answer
    int64_t votes;
  };
  std::vector<Group> groups;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (keys[i].empty()) continue;
    bool joined = false;
    for (Group& g : groups)
      if (keys[g.first] == keys[i] || (math && math_answers_equal(keys[g.first], keys[i]))) {
        ++g.votes;
        joined = true;
        break;
      }
    if (!joined) groups.push_back({i, 1});
  }
  Vote vote;
  for (const Group& g : groups)  // strictly more: a tie keeps the earlier key
    if (g.votes > vote.votes) vote = {keys[g.first], g.votes, rewards[g.first] > 0};
  return vote;
}

}  // namespace areal
