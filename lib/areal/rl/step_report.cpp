#include "areal/rl/step_report.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "areal/rl/rejection_sampling.h"
#include "areal/util/memory.h"
#include "areal/util/strings.h"

namespace areal {

StepStats gather_step_stats(int64_t step, int64_t total_steps, int64_t epoch, size_t prompts,
                            const StepParts& parts, bool asynchronous, Communicator& comm) {
  const Rollout& r = parts.rollout->batch;
  const StepAdvantages& adv = *parts.advantages;
  const UpdateFigures& u = *parts.update;
  const double rows = static_cast<double>(r.rows());
  double reward_sum = 0, reward_sq = 0, correct = 0;
  for (double x : r.rewards) {
    reward_sum += x;
    reward_sq += x * x;
    correct += x > 0;
  }
  // Staleness: how many versions each answer's first token lags the weights it trains.
  double stale_sum = 0, stale_max = 0;
  for (int64_t v : r.head_versions) {
    stale_sum += static_cast<double>(step - v);
    stale_max = std::max(stale_max, static_cast<double>(step - v));
  }
  enum Sum { kRewardSum, kRewardSq, kCorrect, kRows, kTokens, kTruncated, kClipped, kDual, kEntropy, kKl, kFailures,
             kTrainTokens, kKept, kStale, kFiltered, kEpisodes, kTurns, kToolMessages, kEnvFailures, kLimitEnds,
             kEnvTokens, kEnvSeconds, kForwardTokens, kSums };
  const EpisodeCounts& e = r.episodes;
  at::Tensor sums = at::tensor(
      {reward_sum, reward_sq, correct, rows, static_cast<double>(r.answer_tokens), static_cast<double>(r.truncated),
       u.clipped, u.dual_clipped, u.entropy, adv.kl.defined() ? adv.kl.sum().item<double>() : 0.0,
       static_cast<double>(r.reward_failures), static_cast<double>(r.ids.numel()),
       adv.kept.defined() ? adv.kept.sum().item<double>() : rows, stale_sum, adv.filtered_tokens,
       static_cast<double>(e.episodes), static_cast<double>(e.turns), static_cast<double>(e.tool_messages),
       static_cast<double>(e.env_failures), static_cast<double>(e.limit_ends), static_cast<double>(e.env_tokens),
       e.env_seconds, u.forward_tokens},
      at::kDouble);
  comm.all_reduce(sums, ReduceOp::Sum);
  // Peak memory is the host's high-water mark; a GPU allocator's peak is not recorded yet.
  enum Max { kLongest, kPeak, kRollout, kTrain, kWeights, kCache, kStaleMax, kSync, kMaxima };
  at::Tensor maxima = at::tensor({static_cast<double>(r.longest_answer), static_cast<double>(peak_rss_bytes()),
                                  parts.rollout->seconds, parts.train_seconds,
                                  static_cast<double>(parts.rollout->weight_bytes),
                                  static_cast<double>(parts.rollout->cache_bytes), stale_max, parts.sync_seconds},
                                 at::kDouble);
  comm.all_reduce(maxima, ReduceOp::Max);
  auto s = [&](Sum i) { return sums[i].item<double>(); };
  auto mx = [&](Max i) { return maxima[i].item<double>(); };
  const double n = s(kRows), tokens = std::max(1.0, s(kTokens));
  StepStats st;
  st.step = step + 1;
  st.total_steps = total_steps;
  st.epoch = epoch;
  st.prompts = static_cast<int64_t>(prompts);
  st.answers = n;
  st.reward_mean = s(kRewardSum) / n;
  st.reward_std = std::sqrt(std::max(0.0, s(kRewardSq) / n - st.reward_mean * st.reward_mean));
  st.accuracy = s(kCorrect) / n;
  st.response_length_mean = s(kTokens) / n;
  st.response_length_max = mx(kLongest);
  st.truncated_share = s(kTruncated) / n;
  st.loss = u.updates > 0 ? u.loss / u.updates : NAN;
  st.clip_fraction = s(kClipped) / tokens;
  st.dual_clip_fraction = s(kDual) / tokens;
  st.entropy = s(kEntropy) / tokens;
  st.kl = s(kKl) / tokens;
  st.grad_norm = u.updates > 0 ? u.grad_norm / u.updates : NAN;
  st.lr = u.lr;
  st.rollout_seconds = mx(kRollout);
  st.train_seconds = mx(kTrain);
  st.step_seconds = parts.step_seconds;
  st.weight_sync_seconds = mx(kSync);
  // Colocated: tokens per second of the rollout phase; asynchronous: of the whole step
  // (generation runs beside it, rollout_seconds is only the trainers' wait).
  st.gen_tokens_per_second = s(kTokens) / std::max(1e-9, asynchronous ? parts.step_seconds : mx(kRollout));
  st.train_tokens_per_second = s(kTrainTokens) / std::max(1e-9, mx(kTrain));
  st.train_forward_tokens = s(kForwardTokens);
  st.peak_memory_bytes = mx(kPeak);
  st.rollout_weight_bytes = mx(kWeights);
  st.rollout_cache_bytes = mx(kCache);
  st.reward_failures = s(kFailures);
  st.kept_answers = s(kKept);
  st.staleness_mean = s(kStale) / n;
  st.filtered_share = s(kFiltered) / tokens;
  st.staleness_max = mx(kStaleMax);
  st.episodes = s(kEpisodes);
  if (st.episodes > 0) {
    st.turns_mean = s(kTurns) / st.episodes;
    st.tool_calls_mean = s(kToolMessages) / st.episodes;
    st.env_seconds_mean = s(kEnvSeconds) / st.episodes;
    st.env_failures = s(kEnvFailures);
    st.limit_ends = s(kLimitEnds);
    st.masked_token_share = s(kEnvTokens) / tokens;
  }
  return st;
}

Stats stats_row(const Config& cfg, const StepStats& s, const StepRollout& rollout, bool asynchronous) {
  Stats row = {{"epoch", static_cast<double>(s.epoch)},
               {"prompts", static_cast<double>(s.prompts)},
               {"reward_mean", s.reward_mean},
               {"reward_std", s.reward_std},
               {"accuracy", s.accuracy},
               {"response_length_mean", s.response_length_mean},
               {"response_length_max", s.response_length_max},
               {"truncated_share", s.truncated_share},
               {"loss", s.loss},
               {"clip_fraction", s.clip_fraction},
               {"dual_clip_fraction", s.dual_clip_fraction},
               {"entropy", s.entropy},
               {"kl", s.kl},
               {"grad_norm", s.grad_norm},
               {"lr", s.lr},
               {"rollout_seconds", s.rollout_seconds},
               {"train_seconds", s.train_seconds},
               {"gen_tokens_per_second", s.gen_tokens_per_second},
               {"train_tokens_per_second", s.train_tokens_per_second},
               {"train_forward_tokens", s.train_forward_tokens},
               {"peak_memory_bytes", s.peak_memory_bytes},
               {"rollout_weight_bytes", s.rollout_weight_bytes},
               {"rollout_cache_bytes", s.rollout_cache_bytes},
               {"reward_failures", s.reward_failures}};
  if (cfg.actor.dynamic_sampling) {
    row.push_back({"dynamic_sampling_kept_share", s.kept_answers / s.answers});
    row.push_back({"dynamic_sampling_kept_groups", s.kept_answers / static_cast<double>(cfg.gconfig.n_samples)});
  }
  if (cfg.actor.use_decoupled_loss && effective_rejection_sampling(cfg.actor).level != "none")
    row.push_back({"rejection_filtered_share", s.filtered_share});
  if (rollout.refilled) row.push_back({"refill_rounds", static_cast<double>(rollout.refill_rounds)});
  if (s.episodes > 0) {  // multi-turn episodes (docs/agentic.md)
    row.push_back({"turns_mean", s.turns_mean});
    row.push_back({"tool_calls_mean", s.tool_calls_mean});
    row.push_back({"env_seconds_mean", s.env_seconds_mean});
    row.push_back({"env_failures", s.env_failures});
    row.push_back({"episodes_ended_by_limit", s.limit_ends});
    row.push_back({"masked_token_share", s.masked_token_share});
  }
  row.push_back({"step_seconds", s.step_seconds});
  if (asynchronous) {  // rollout_seconds is the trainers' wait for the queue
    row.push_back({"staleness_mean", s.staleness_mean});
    row.push_back({"staleness_max", s.staleness_max});
    row.push_back({"weight_sync_seconds", s.weight_sync_seconds});
  }
  return row;
}

std::string step_line(const StepStats& s) {
  char line[400];
  std::snprintf(line, sizeof line,
                "step %lld/%lld  reward %.3f+-%.3f  acc %.3f  len %.1f/%.0f  trunc %.2f  loss %.4f  clip %.3f  "
                "kl %.4f  ent %.3f  grad %.3f  lr %.2e  rollout %.1fs  train %.1fs  gen %.0f tok/s  mem %s",
                static_cast<long long>(s.step), static_cast<long long>(s.total_steps), s.reward_mean, s.reward_std,
                s.accuracy, s.response_length_mean, s.response_length_max, s.truncated_share, s.loss, s.clip_fraction,
                s.kl, s.entropy, s.grad_norm, s.lr, s.rollout_seconds, s.train_seconds, s.gen_tokens_per_second,
                format_bytes(static_cast<int64_t>(s.peak_memory_bytes)).c_str());
  if (s.episodes > 0) return cat(line, "  turns ", format_fixed(s.turns_mean, 2), "  tools ", format_fixed(s.tool_calls_mean, 2));
  return line;
}

}  // namespace areal
