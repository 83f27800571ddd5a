// Rewards -> advantages -> PPO loss on fixed tensors, against values computed by hand
// (the arithmetic is written out next to each expectation).
#include <ATen/ATen.h>
#include "catch_with_torch.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "areal/rl/advantages.h"
#include "areal/rl/batch_refill.h"
#include "areal/rl/ppo_loss.h"
#include "areal/rl/rejection_sampling.h"

using namespace areal;

namespace {
at::Tensor t(std::vector<float> v) { return at::tensor(v, at::kFloat); }
at::Tensor t2(std::vector<float> v, int64_t cols) { return t(v).view({-1, cols}); }
bool close(const at::Tensor& a, const at::Tensor& b, double tol = 1e-5) { return at::allclose(a, b, 0, tol); }
}  // namespace

TEST_CASE("rl: reward transform is (r + bias) * scaling, clipped", "[rl][advantages]") {
  ActorConfig a;
  a.reward_bias = -0.5;
  a.reward_scaling = 4;
  a.reward_clip = 3;
  CHECK(transform_reward(1.0, a) == 2.0);    // (1 - 0.5) * 4
  CHECK(transform_reward(2.0, a) == 3.0);    // 6 clipped to 3
  CHECK(transform_reward(-1.0, a) == -3.0);  // -6 clipped to -3
}

TEST_CASE("rl: KL estimators k1, k2, k3", "[rl][advantages]") {
  at::Tensor logp = t({-1.0f, -2.0f}), ref = t({-1.5f, -1.0f});
  // log ratio logp - ref = [0.5, -1]
  CHECK(close(kl_estimate(logp, ref, "k1"), t({0.5f, -1.0f})));
  CHECK(close(kl_estimate(logp, ref, "k2"), t({0.125f, 0.5f})));
  // k3 = exp(ref - logp) - (ref - logp) - 1 = [e^-0.5 + 0.5 - 1, e^1 - 1 - 1]
  CHECK(close(kl_estimate(logp, ref, "k3"), t({std::exp(-0.5f) - 0.5f, std::exp(1.0f) - 2.0f})));
  CHECK_THROWS(kl_estimate(logp, ref, "k4"));
}

TEST_CASE("rl: token advantages put the score on the last answer token, then discounted returns", "[rl][advantages]") {
  // Row 0: answer tokens at positions 1, 2; row 1: at 2, 3.
  at::Tensor mask = t2({0, 1, 1, 0, 0, 0, 1, 1}, 4);
  at::Tensor scores = t({1.0f, -1.0f});
  SECTION("no KL, discount 1: every answer token gets the score") {
    CHECK(close(token_advantages(scores, {}, mask, 0, 1, 1), t2({0, 1, 1, 0, 0, 0, -1, -1}, 4)));
  }
  SECTION("discount 0.5, lambda 1: the score halves per step back") {
    CHECK(close(token_advantages(scores, {}, mask, 0, 0.5, 1), t2({0, 0.5, 1, 0, 0, 0, -0.5, -1}, 4)));
  }
  SECTION("KL penalty: r_t = -kl_ctl * kl_t, plus the score at the end") {
    at::Tensor kl = t2({9, 0.2f, 0.4f, 9, 9, 9, 0.1f, 0.3f}, 4);  // 9s sit outside the mask and must not count
    // row 0: r = [-, -0.1, -0.2 + 1]; returns = [0.7, 0.8]; row 1: r = [-0.05, -0.15 - 1] -> [-1.2, -1.15]
    CHECK(close(token_advantages(scores, kl * mask, mask, 0.5, 1, 1), t2({0, 0.7f, 0.8f, 0, 0, 0, -1.2f, -1.15f}, 4)));
  }
}

TEST_CASE("rl: an episode's environment tokens pass its return to the turns before them", "[rl][advantages][episodes]") {
  // Turn 1 at positions 1, 2; the environment's message at 3, 4 (mask 0); turn 2 at 5, 6.
  // Every turn earns the episode's score (the tool call in turn 1 included), and a
  // discount counts the model's tokens only.
  at::Tensor mask = t2({0, 1, 1, 0, 0, 1, 1, 0}, 8);
  at::Tensor scores = t({2.0f});
  CHECK(close(token_advantages(scores, {}, mask, 0, 1, 1), t2({0, 2, 2, 0, 0, 2, 2, 0}, 8)));
  CHECK(close(token_advantages(scores, {}, mask, 0, 0.5, 1), t2({0, 0.25f, 0.5f, 0, 0, 1, 2, 0}, 8)));
}

TEST_CASE("rl: advantage normalization by group and batch, leave-one-out, unbiased std", "[rl][advantages]") {
  // 4 answers of one token each, groups of 2: values 1, 0 | 1, 1.
  at::Tensor mask = at::ones({4, 1});
  at::Tensor adv = t2({1, 0, 1, 1}, 1);
  NormConfig n;
  n.eps = 0;
  SECTION("group mean only") {
    n.mean_level = "group";
    n.std_level = "none";
    CHECK(close(normalize_advantages(adv, mask, n, 2, nullptr), t2({0.5f, -0.5f, 0, 0}, 1)));
  }
  SECTION("group mean, leave one out: the others' mean") {
    n.mean_level = "group";
    n.mean_leave1out = true;
    n.std_level = "none";
    CHECK(close(normalize_advantages(adv, mask, n, 2, nullptr), t2({1, -1, 0, 0}, 1)));
  }
  SECTION("batch mean and unbiased batch std") {
    n.mean_level = "batch";
    n.std_level = "batch";
    // mean 0.75; var = (3 * 0.0625 + 0.5625) / 3 = 0.25; std 0.5
    CHECK(close(normalize_advantages(adv, mask, n, 2, nullptr), t2({0.5f, -1.5f, 0.5f, 0.5f}, 1)));
  }
  SECTION("group mean and biased group std; a group of equal values stays 0") {
    n.mean_level = "group";
    n.std_level = "group";
    n.std_unbiased = false;
    n.eps = 1e-5;
    // group 1: mean 0.5, std 0.5 -> +-1 (eps aside); group 2: 0 / (0 + eps) = 0
    CHECK(close(normalize_advantages(adv, mask, n, 2, nullptr), t2({1, -1, 0, 0}, 1), 1e-4));
  }
  SECTION("padding tokens neither count nor get an advantage") {
    at::Tensor padded = t2({1, 5, 0, 5, 1, 5, 1, 5}, 2), m = t2({1, 0, 1, 0, 1, 0, 1, 0}, 2);
    n.mean_level = "batch";
    n.std_level = "none";
    CHECK(close(normalize_advantages(padded, m, n, 2, nullptr), t2({0.25f, 0, -0.75f, 0, 0.25f, 0, 0.25f, 0}, 2)));
  }
}

TEST_CASE("rl: PPO clipped loss, asymmetric clip and dual clip", "[rl][ppo]") {
  // ratios e^0.5 = 1.6487, e^-0.5 = 0.6065, 1, e^0.1 = 1.1052
  at::Tensor old_logp = t({-1, -1, -1, -1});
  at::Tensor logp = t({-0.5f, -1.5f, -1, -0.9f});
  at::Tensor adv = t({1, 1, -2, -1});
  const double r0 = std::exp(0.5), r1 = std::exp(-0.5), r3 = std::exp(0.1);
  SECTION("symmetric eps 0.2") {
    PpoTokenLoss l = ppo_token_loss(logp, old_logp, adv, 0.2, 0, 0);
    // A > 0, ratio 1.65: max(-1.65, -1.2) = -1.2 (clipped); ratio 0.61: max(-0.61, -0.8) = -0.61
    // A = -2, ratio 1: 2; A = -1, ratio 1.105: max(1.105, 1.105) = 1.105 (inside the range)
    CHECK(close(l.loss, t({-1.2f, static_cast<float>(-r1), 2.0f, static_cast<float>(r3)})));
    CHECK(l.clipped.equal(at::tensor({1, 0, 0, 0}, at::kLong).to(at::kBool)));
  }
  SECTION("eps_clip_higher widens the upper bound only") {
    PpoTokenLoss l = ppo_token_loss(logp, old_logp, adv, 0.2, 0.28, 0);
    CHECK(l.loss[0].item<float>() == Approx(-1.28));
    CHECK(l.loss[1].item<float>() == Approx(-r1));
  }
  SECTION("dual clip caps the loss of negative advantages at -A * c_clip") {
    at::Tensor big = t({-1, -1, 1.5f, -1});  // ratio e^2.5 = 12.18 for the third token
    PpoTokenLoss l = ppo_token_loss(big, old_logp, t({1, 1, -2, -1}), 0.2, 0, 3);
    CHECK(l.loss[2].item<float>() == Approx(6.0));  // min(2 * 12.18, 2 * 3)
    CHECK(l.dual_clipped.equal(at::tensor({0, 0, 1, 0}, at::kLong).to(at::kBool)));
  }
  SECTION("the gradient pushes up tokens with positive advantage, inside the clip range only") {
    at::Tensor x = logp.clone().requires_grad_(true);
    ppo_token_loss(x, old_logp, adv, 0.2, 0, 0).loss.sum().backward();
    // d/dx of -A * e^(x - old) = -A * ratio, zero where the clipped term was taken
    CHECK(close(x.grad(), t({0, static_cast<float>(-r1), 2.0f, static_cast<float>(r3)})));
  }
  (void)r0;
}

TEST_CASE("rl: token log-probs and entropy from logits with a temperature", "[rl][ppo]") {
  at::Tensor logits = t({2.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f}).view({1, 2, 3});
  at::Tensor targets = at::tensor({0, 2}, at::kLong).view({1, 2});
  TokenLogprobs tl = token_logprobs(logits, targets, 2.0);
  // position 0: logits / 2 = [1, 0, 0]: log(e / (e + 2)); position 1: uniform: log(1/3), entropy log 3
  CHECK(tl.logprobs[0][0].item<float>() == Approx(std::log(std::exp(1.0) / (std::exp(1.0) + 2))));
  CHECK(tl.logprobs[0][1].item<float>() == Approx(std::log(1.0 / 3)));
  CHECK(tl.entropy[0][1].item<float>() == Approx(std::log(3.0)));
}

TEST_CASE("rl: reward normalization (AReaL's reward_norm) by group, leave-one-out, off by default",
          "[rl][advantages]") {
  // Two prompts of three answers: scores [1, 0, 0] and [1, 1, 1].
  const at::Tensor scores = t({1, 0, 0, 1, 1, 1});
  CHECK(at::equal(normalize_rewards(scores, ActorConfig().reward_norm, nullptr), scores));  // AReaL's null
  NormConfig grpo;  // AReaL's GSM8K GRPO: group mean and group std
  grpo.mean_level = "group";
  grpo.std_level = "group";
  grpo.group_size = 3;
  // Group 1: mean 1/3, unbiased std sqrt(((2/3)^2 + 2 (1/3)^2) / 2) = sqrt(1/3) = 0.57735;
  // group 2: std 0, so its (zero) deviations stay 0.
  const float s = std::sqrt(1.0f / 3.0f) + 1e-5f;
  CHECK(close(normalize_rewards(scores, grpo, nullptr), t({(2.0f / 3) / s, (-1.0f / 3) / s, (-1.0f / 3) / s, 0, 0, 0})));
  NormConfig rloo = grpo;  // leave-one-out baseline, no std
  rloo.mean_leave1out = true;
  rloo.std_level = "none";
  // Row 0: 1 - mean(0, 0) = 1; rows 1, 2: 0 - mean(1, 0) = -0.5; group 2: 1 - 1 = 0.
  CHECK(close(normalize_rewards(scores, rloo, nullptr), t({1, -0.5f, -0.5f, 0, 0, 0})));
  NormConfig batch = grpo;  // the batch: mean 4/6, biased std sqrt(4/6 - (4/6)^2) = 0.4714
  batch.mean_level = batch.std_level = "batch";
  batch.std_unbiased = false;
  const float sd = std::sqrt(4.0f / 6 - 16.0f / 36) + 1e-5f;
  CHECK(close(normalize_rewards(scores, batch, nullptr),
              t({(1 - 4.0f / 6) / sd, (-4.0f / 6) / sd, (-4.0f / 6) / sd, (1 - 4.0f / 6) / sd, (1 - 4.0f / 6) / sd,
                 (1 - 4.0f / 6) / sd})));
}

namespace {
// Two answers, proximal - behaviour = log r: r = [1, 2, 4] and [0.5, 1.5, (padding)].
struct StaleRollout {
  at::Tensor behaviour = t({-1.0f, -2.0f, -3.0f, -1.0f, -1.0f, 0.0f}).view({2, 3});
  at::Tensor proximal = behaviour + t({1.0f, 2.0f, 4.0f, 0.5f, 1.5f, 1.0f}).log().view({2, 3}) *
                                        t({1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 0.0f}).view({2, 3});
  at::Tensor mask = t({1, 1, 1, 1, 1, 0}).view({2, 3});
  RejectionResult run(const std::string& level, const std::string& action, const std::string& metric, double upper,
                      double lower = -INFINITY, const std::string& agg = "mean") const {
    RejectionSamplingConfig rs;
    rs.level = level, rs.action = action, rs.metric = metric, rs.upper = upper, rs.lower = lower, rs.agg = agg;
    return apply_rejection_sampling(proximal, behaviour, mask, rs);
  }
};
at::Tensor rows(std::vector<float> v) { return t(v).view({2, 3}); }
}  // namespace

TEST_CASE("rl: rejection sampling per token, by ratio, masks or clamps the stale tokens", "[rl][ppo]") {
  const StaleRollout s;
  RejectionResult masked = s.run("token", "mask", "ratio", 3);  // r = 4 leaves the loss
  CHECK(close(masked.weights, rows({1, 2, 0, 0.5f, 1.5f, 0})));
  CHECK(close(masked.kept, rows({1, 1, 0, 1, 1, 0})));
  CHECK(masked.filtered_tokens == 1);
  RejectionResult bounded = s.run("token", "mask", "ratio", 3, 0.6);  // and r = 0.5
  CHECK(close(bounded.weights, rows({1, 2, 0, 0, 1.5f, 0})));
  CHECK(bounded.filtered_tokens == 2);
  RejectionResult clamped = s.run("token", "clamp", "ratio", 3);  // r = 4 weighs 3, stays in the loss
  CHECK(close(clamped.weights, rows({1, 2, 3, 0.5f, 1.5f, 0})));
  CHECK(close(clamped.kept, s.mask));
  CHECK(clamped.filtered_tokens == 1);
  // On-policy (proximal = behaviour) every weight is 1 and nothing is filtered.
  RejectionSamplingConfig rs;
  rs.level = "token";
  RejectionResult fresh = apply_rejection_sampling(s.behaviour, s.behaviour, s.mask, rs);
  CHECK(close(fresh.weights, s.mask));
  CHECK(fresh.filtered_tokens == 0);
}

TEST_CASE("rl: rejection sampling per sequence judges an answer by its geometric-mean ratio", "[rl][ppo]") {
  const StaleRollout s;
  const float g1 = std::sqrt(0.75f);  // answer 1's geometric mean; answer 0's is 8^(1/3) = 2
  RejectionResult masked = s.run("sequence", "mask", "ratio", 1.9);
  CHECK(close(masked.weights, rows({0, 0, 0, g1, g1, 0})));  // every token weighs its answer's mean
  CHECK(masked.filtered_tokens == 3);
  RejectionResult clamped = s.run("sequence", "clamp", "ratio", 1.9);
  CHECK(close(clamped.weights, rows({1.9f, 1.9f, 1.9f, g1, g1, 0})));
  // sum: exp(sum log r) = 8 and 0.75; max: the largest token ratio, 4 and 1.5.
  CHECK(close(s.run("sequence", "mask", "ratio", 5, -INFINITY, "sum").kept, rows({0, 0, 0, 1, 1, 0})));
  CHECK(close(s.run("sequence", "mask", "ratio", 3, -INFINITY, "max").kept, rows({0, 0, 0, 1, 1, 0})));
  CHECK(close(s.run("sequence", "mask", "ratio", 5, -INFINITY, "max").kept, s.mask));
  // KL metrics aggregate arithmetically and keep the token weights: k1 means are
  // ln 8 / 3 = 0.69 and ln 0.75 / 2 = -0.14.
  RejectionResult kl = s.run("sequence", "mask", "kl_k1", 0.5);
  CHECK(close(kl.weights, rows({0, 0, 0, 0.5f, 1.5f, 0})));
}

TEST_CASE("rl: rejection sampling by the KL estimators k1, k2, k3 of log r", "[rl][ppo]") {
  const StaleRollout s;
  // k2 = (log r)^2 / 2: 0, 0.24, 0.96 | 0.24, 0.08.
  CHECK(close(s.run("token", "mask", "kl_k2", 0.2).weights, rows({1, 0, 0, 0, 1.5f, 0})));
  // k3 = 1/r + log r - 1: 0, 0.19, 0.64 | 0.31, 0.07.
  CHECK(close(s.run("token", "mask", "kl_k3", 0.25).weights, rows({1, 2, 0, 0, 1.5f, 0})));
  // k1 = log r with lower 0: the tokens whose probability fell leave (AReaL's example).
  CHECK(close(s.run("token", "mask", "kl_k1", 10, 0).weights, rows({1, 2, 4, 0, 1.5f, 0})));
}

TEST_CASE("rl: behav_imp_weight_cap X is rejection sampling by token ratio with upper X", "[rl][ppo]") {
  ActorConfig old_spelling;
  old_spelling.behav_imp_weight_cap = 3;
  const RejectionSamplingConfig rs = effective_rejection_sampling(old_spelling);
  CHECK(rs.level == "token");
  CHECK(rs.action == "mask");
  CHECK(rs.metric == "ratio");
  CHECK(rs.upper == 3);
  // The decoupled loss on stale tokens: ratio against the proximal log-probs, times the
  // filter's weights. logp = proximal + [0.1, -0.5, 0 | 0, 0.2, 0], A = [1, -1, 2 | 1, 1, 0],
  // eps 0.2: ratios e^0.1 (inside), e^-0.5 (for A < 0 the clipped -A * 0.8 is larger), 1.
  const StaleRollout s;
  const at::Tensor logp = s.proximal + rows({0.1f, -0.5f, 0, 0, 0.2f, 0});
  const PpoTokenLoss pl = ppo_token_loss(logp, s.proximal, rows({1, -1, 2, 1, 1, 0}), 0.2, 0, 0);
  const at::Tensor loss = pl.loss * apply_rejection_sampling(s.proximal, s.behaviour, s.mask, rs).weights;
  CHECK(close(loss, rows({-std::exp(0.1f), 0.8f * 2, 0, -0.5f, -1.2f * 1.5f, 0})));
}

TEST_CASE("rl: DAPO's overlong penalty grows linearly over the last overlong_tokens", "[rl][advantages][dapo]") {
  // max_new_tokens 100, overlong_tokens 20, factor 1: free up to 80 tokens, then -1/20 a token.
  CHECK(overlong_penalty(50, 100, 20, 1.0) == 0.0);
  CHECK(overlong_penalty(80, 100, 20, 1.0) == 0.0);
  CHECK(overlong_penalty(90, 100, 20, 1.0) == Approx(-0.5));  // 10 of 20 past the limit
  CHECK(overlong_penalty(100, 100, 20, 0.5) == Approx(-0.5));  // the whole tail: -factor
}

TEST_CASE("rl: DAPO's dynamic sampling keeps the groups whose scores differ", "[rl][advantages][dapo]") {
  // Groups of 3: [1, 0, 1] has a signal, [2, 2, 2] and [0, 0, 0] have none.
  const at::Tensor scores = t({1, 0, 1, 2, 2, 2, 0, 0, 0});
  CHECK(at::equal(groups_with_signal(scores, 3, nullptr), t({1, 1, 1, 0, 0, 0, 0, 0, 0})));
  // No group with a signal anywhere: all stay (AReaL's rule), not an empty step.
  CHECK(at::equal(groups_with_signal(t({1, 1, 0, 0}), 2, nullptr), t({1, 1, 1, 1})));
  // The groups that left take no part in the batch statistics and come back as 0:
  // batch mean of the kept [1, 0, 1] is 2/3.
  NormConfig batch;
  batch.std_level = "none";
  const at::Tensor kept = groups_with_signal(scores, 3, nullptr);
  CHECK(close(normalize_rewards(scores, batch, nullptr, kept), t({1.0f / 3, -2.0f / 3, 1.0f / 3, 0, 0, 0, 0, 0, 0})));
}

TEST_CASE("rl: loss aggregation modes token-mean and seq-mean (token sum / mean / sum over a constant)",
          "[rl][ppo][loss_agg]") {
  // Three answers: 2 tokens, 4 tokens, and one left out (dynamic sampling: no mask).
  const at::Tensor mask = t2({1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0}, 4);
  const at::Tensor loss = t2({1, 3, 9, 9, 2, 2, 4, 8, 5, 5, 5, 5}, 4);
  // Answer sums: 1 + 3 = 4 and 2 + 2 + 4 + 8 = 16, over 6 tokens, 2 answers.
  auto aggregate = [&](const std::string& mode) {
    return (loss * loss_token_weights(mask, mode, 8)).sum().item<double>() / loss_units(mask, mode);
  };
  CHECK(loss_units(mask, "token-mean") == 6);
  CHECK(loss_units(mask, "seq-mean-token-mean") == 2);
  CHECK(aggregate("token-mean") == Approx(20.0 / 6));                  // (4 + 16) / 6
  CHECK(aggregate("seq-mean-token-sum") == Approx(10.0));              // (4 + 16) / 2
  CHECK(aggregate("seq-mean-token-mean") == Approx(3.0));              // (4/2 + 16/4) / 2
  CHECK(aggregate("seq-mean-token-sum-norm") == Approx(1.25));         // (4/8 + 16/8) / 2
  // Units add up over ranks: the rows split between two ranks give the same loss.
  for (const char* mode : {"token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"}) {
    INFO(mode);
    const at::Tensor w = loss_token_weights(mask, mode, 8);
    double sum = 0, units = 0;
    for (int64_t rank = 0; rank < 2; ++rank) {
      const at::Tensor rows = mask.narrow(0, rank * 2, rank == 0 ? 2 : 1);
      sum += (loss.narrow(0, rank * 2, rows.size(0)) * loss_token_weights(rows, mode, 8)).sum().item<double>();
      units += loss_units(rows, mode);
    }
    CHECK(sum / units == Approx((loss * w).sum().item<double>() / loss_units(mask, mode)));
  }
}

TEST_CASE("rl: DAPO's refill draws seeded prompts and takes groups with a signal in rank order",
          "[rl][advantages][dapo]") {
  // The same draw on every rank and in a resumed run; another round or step draws others.
  const std::vector<size_t> draw = refill_prompts(1, 5, 1, 64, 10, {});
  CHECK(draw == refill_prompts(1, 5, 1, 64, 10, {}));
  CHECK(draw != refill_prompts(1, 5, 2, 64, 10, {}));
  CHECK(draw != refill_prompts(1, 6, 1, 64, 10, {}));
  CHECK(draw.size() == 64);
  for (size_t index : draw) CHECK(index < 10);
  // Without replacement within a step (issue 26, defect 7: uniform draws with replacement
  // gave one prompt twice in a round, and so two identical groups, trained on twice):
  // the step's batch and earlier rounds are not drawn while other prompts remain, and a
  // round repeats a prompt only past the size of the training set (64 of 10 above: each
  // index 6 or 7 times).
  const std::vector<size_t> batch = {0, 1, 2, 3};
  const std::vector<size_t> round1 = refill_prompts(1, 5, 1, 4, 10, batch);
  std::vector<size_t> drawn = batch;
  drawn.insert(drawn.end(), round1.begin(), round1.end());
  const std::vector<size_t> round2 = refill_prompts(1, 5, 2, 4, 10, drawn);
  std::set<size_t> seen(batch.begin(), batch.end());
  for (size_t index : round1) CHECK(seen.insert(index).second);
  std::set<size_t> second(round2.begin(), round2.end());
  CHECK(second.size() == 4);
  for (size_t index = 0; index < 10; ++index)
    if (!seen.count(index)) CHECK(second.count(index) == 1);  // the 2 prompts left unused come first
  for (size_t index = 0; index < 10; ++index)
    CHECK(std::count(draw.begin(), draw.end(), index) >= 6);
  // Groups of 2: [1, 0] and [0.5, 0.5 + tiny] have a signal, [2, 2] has none.
  CHECK(group_signals({1, 0, 2, 2, 0.5, 0.5000001}, 2) == std::vector<bool>{true, false, true});
  // 3 more groups wanted; ranks have 2, 0, 4 groups with a signal: rank 0 takes 2, rank
  // 1 none, rank 2 the 1 left.
  CHECK(groups_taken({2, 0, 4}, 0, 3) == 2);
  CHECK(groups_taken({2, 0, 4}, 1, 3) == 0);
  CHECK(groups_taken({2, 0, 4}, 2, 3) == 1);
  CHECK(groups_taken({2, 0, 4}, 2, 10) == 4);  // never more than it has
  CHECK(groups_taken({2, 0, 4}, 0, 0) == 0);
}

TEST_CASE("rl: GSPO's sequence-level ratio is the geometric mean of an answer's token ratios", "[rl][ppo][gspo]") {
  // One row holding two packed answers (ids 0 and 1) and a position of no answer (mask 0).
  const at::Tensor base = t2({-1, -1, -1, -2, -2}, 5);
  const at::Tensor logp = (base + t2({0.2f, 0.4f, 9.0f, -0.3f, 0.1f}, 5)).requires_grad_(true);
  const at::Tensor mask = t2({1, 1, 0, 1, 1}, 5);
  const at::Tensor sequence = t2({0, 0, 0, 1, 1}, 5);
  const at::Tensor seq_logp = sequence_level_logp(logp, base, mask, sequence);
  // Answer 0: log-ratios 0.2, 0.4 -> mean 0.3 (the masked 9.0 is left out);
  // answer 1: -0.3, 0.1 -> mean -0.1. Every position of an answer gets its ratio.
  const at::Tensor ratio = (seq_logp - base).exp();
  CHECK(close(ratio.detach(), t2({std::exp(0.3f), std::exp(0.3f), std::exp(0.3f), std::exp(-0.1f), std::exp(-0.1f)}, 5)));
  // One clip per answer: with eps 0.2, e^0.3 = 1.35 is clipped for A > 0 at every token of answer 0.
  const PpoTokenLoss pl = ppo_token_loss(seq_logp, base, t2({1, 1, 1, 1, 1}, 5), 0.2, 0, 0);
  CHECK(at::equal(pl.clipped.masked_select(mask.to(at::kBool)).to(at::kFloat), t({1, 1, 0, 0})));
  // The gradient of the mean: d(sum over answer 1's two positions of its log-ratio)/d logp_t
  // = 2 * (1/2) for each of its tokens, 0 for the masked position.
  ((seq_logp - base) * mask * (sequence == 1)).sum().backward();
  CHECK(close(logp.grad(), t2({0, 0, 0, 1, 1}, 5)));
}
