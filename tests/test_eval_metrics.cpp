// pass@k, maj@k and the answer key of --job eval (rl/eval_metrics.h). The job's
// numbers are checked against a Python reference in tests/eval_job.sh.
#include <catch2/catch.hpp>

#include <stdexcept>

#include "areal/rl/eval_metrics.h"

using namespace areal;

TEST_CASE("eval metrics: pass@k is Chen et al.'s estimator", "[eval]") {
  CHECK(pass_at_k(5, 2, 2) == Approx(1.0 - 3.0 / 10.0));  // 1 - C(3,2) / C(5,2)
  CHECK(pass_at_k(10, 3, 1) == Approx(0.3));               // k = 1: the share right
  CHECK(pass_at_k(16, 0, 8) == 0.0);
  CHECK(pass_at_k(4, 3, 2) == 1.0);  // fewer wrong answers than k: always right
  CHECK(pass_at_k(200, 1, 100) == Approx(0.5));
  CHECK_THROWS_AS(pass_at_k(4, 1, 5), std::invalid_argument);
  CHECK_THROWS_AS(pass_at_k(4, 5, 1), std::invalid_argument);
  CHECK_THROWS_AS(pass_at_k(4, 1, 0), std::invalid_argument);
  CHECK(reported_ks(1) == std::vector<int64_t>{1});
  CHECK(reported_ks(8) == std::vector<int64_t>{1, 2, 4, 8});
  CHECK(reported_ks(6) == std::vector<int64_t>{1, 2, 4, 6});
}

TEST_CASE("eval metrics: the answer a vote counts and the majority vote", "[eval]") {
  CHECK(answer_key("math", "so x = \\boxed{\\frac{1}{2}} done") == "\\frac{1}{2}");
  CHECK(answer_key("math", "no answer here") == "");
  CHECK(answer_key("exact_match", " 12\n") == "12");
  CHECK(answer_key("exact_match", "<calc>1*2</calc>2\n 2 \n\n") == "<calc>1*2</calc>2\n 2");
  CHECK(answer_key("exact_match", " \n") == "");

  // Math: equal values vote together; the vote is right when its first answer is.
  Vote v = majority_vote("math", {"1/2", "3", "0.5", "3", "\\frac{1}{2}"}, {1, 0, 1, 0, 1});
  CHECK(v.answer == "1/2");
  CHECK(v.votes == 3);
  CHECK(v.correct);
  // A tie goes to the key seen first; answers with no key do not vote.
  v = majority_vote("exact_match", {"", "7", "8", "8", "7", ""}, {0, 0, 1, 1, 0, 0});
  CHECK(v.answer == "7");
  CHECK(v.votes == 2);
  CHECK_FALSE(v.correct);
  // Not math: strings, not values.
  v = majority_vote("exact_match", {"0.5", "1/2", "1/2"}, {1, 0, 0});
  CHECK(v.answer == "1/2");
  CHECK_FALSE(v.correct);
  v = majority_vote("math", {"", ""}, {0, 0});
  CHECK(v.answer.empty());
  CHECK(v.votes == 0);
  CHECK_FALSE(v.correct);
}
