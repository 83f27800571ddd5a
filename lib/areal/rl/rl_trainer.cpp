#include "areal/rl/rl_trainer.h"

#include <ATen/ATen.h>

#include <chrono>
#include <filesystem>
#include <optional>

#include "areal/config/run_paths.h"
#include "areal/optim/adamw.h"
#include "areal/recover/periodic_saves.h"
#include "areal/recover/run_recovery.h"
#include "areal/rl/async_queue.h"
#include "areal/rl/async_rollout.h"
#include "areal/rl/colocated_rollout.h"
#include "areal/rl/ppo_update.h"
#include "areal/rl/step_report.h"
#include "areal/stats/stats_logger.h"
#include "areal/util/clock.h"
#include "areal/util/crash_point.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/stop_signal.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// The step's prompts: every epoch has steps_per_epoch batches, so the step alone says
// where the run is.
const std::vector<size_t>& batch_of(int64_t step, const TrainingSchedule& schedule, EpochPlan& plan) {
  const size_t b = static_cast<size_t>(step % schedule.steps_per_epoch);
  if (b == 0 || plan.batches.empty()) plan = plan_epoch(schedule.epochs, step / schedule.steps_per_epoch);
  return plan.batches[b];
}

// An evaluation's eval_accuracy (-1: none).
double greedy_accuracy(const Stats& figures) {
  for (const auto& [key, value] : figures)
    if (key == "eval_accuracy") return value;
  return -1;
}

// Reports the step (stats over all ranks: the console line, stats.jsonl and
// TensorBoard, the held-out score when one is due), then saves and recovers.
void report_and_save(const Config& cfg, int64_t step, const std::vector<size_t>& batch, const StepParts& parts,
                     RolloutSource& source, const RlInputs& in, Communicator& comm, StatsLogger& stats,
                     PeriodicSaver& saver, RunRecovery& recovery, Policy& policy, RlSummary& summary,
                     int bad_in_a_row, const GenerationLink* link) {
  const int64_t total = in.schedule.total_steps;
  // Over the ranks where every answer counts once (with context parallelism a group shares them).
  const StepStats s = gather_step_stats(step, total, step / in.schedule.steps_per_epoch, batch.size(), parts,
                                        source.asynchronous(), policy.data_comm());
  if (step == 0) summary.first_reward = s.reward_mean;
  summary.last_reward = s.reward_mean;
  log::info(step_line(s));
  if (s.reward_failures > 0) log::warn(cat(s.reward_failures, " answers scored 0 because the reward function failed"));
  Stats row = stats_row(cfg, s, *parts.rollout, source.asynchronous());
  for (auto& figure : policy.router_figures()) row.push_back(std::move(figure));  // a mixture of experts'
  source.add_stats(row);
  const bool last = step + 1 == total;
  if (std::optional<Stats> figures = source.evaluate_after_step(step + 1, last))
    row.insert(row.end(), figures->begin(), figures->end());
  stats.log(step + 1, row);
  saver.after_step(step + 1, last, policy);
  if (link) note_stop_signal(take_stop_notes(*link->mail));  // a generation rank's, relayed
  recovery.after_step(step + 1, last,
                      {{"eval_before", summary.eval_before},
                       {"first_reward", summary.first_reward},
                       {"bad_updates_in_a_row", static_cast<double>(bad_in_a_row)}});
}

}  // namespace

RlSummary run_rl(const Config& cfg, const RlInputs& in, const RankInfo& me, Communicator& comm, Policy& policy,
                 const GenerationLink* link) {
  const TrainingSchedule& schedule = in.schedule;
  const at::Device device(me.device);
  log::info(cat("rl: ", in.train->size(), " prompts, ", schedule.steps_per_epoch, " steps per epoch, ",
                schedule.total_steps, " steps; ", cfg.train_dataset.batch_size, " prompts x ", cfg.gconfig.n_samples,
                " answers per step, ", cfg.actor.ppo_n_minibatches, " minibatches"));
  if (old_logp_from_update(cfg.actor))
    log::info("rl: actor.recompute_logprob from the update's own forward (one minibatch, no KL): no separate forward");
  ShardedAdamW optimizer(policy.trainable(), cfg.optimizer, comm);
  if (cfg.actor.kl_ctl > 0) policy.keep_reference();  // the initial weights, also when resumed
  RunRecovery recovery(cfg, "rl", schedule.steps_per_epoch, comm, policy, optimizer);
  std::optional<RecoverPoint> resumed = recovery.resume();
  StatsLogger stats(cfg, me.rank, resumed ? resumed->steps_done : -1);
  PeriodicSaver saver(cfg, schedule.steps_per_epoch, comm);
  RlSummary summary;
  std::unique_ptr<RolloutSource> source =
      link ? make_async_rollout(cfg, in, *link, me.rank, me.world_size, policy, stats, summary)
           : make_colocated_rollout(cfg, in, me, comm, policy);
  int bad_in_a_row = 0;
  int64_t step = 0;
  if (resumed) {
    step = resumed->steps_done;
    summary.eval_before = resumed->figures["eval_before"];
    summary.first_reward = resumed->figures["first_reward"];
    bad_in_a_row = static_cast<int>(resumed->figures["bad_updates_in_a_row"]);
  } else {
    const Stats before = source->evaluate_before();
    summary.eval_before = greedy_accuracy(before);
    if (!before.empty() && !link) stats.log(0, before);
  }
  source->begin(step);
  EpochPlan plan;
  auto step_start = Clock::now();
  try {
    for (; step < schedule.total_steps; ++step) {
      const std::vector<size_t>& batch = batch_of(step, schedule, plan);
      comm.set_activity(cat("rl step ", step + 1));
      fault_points(cat("rl:step", step + 1), me.rank);
      StepRollout rollout = source->rollout(step, batch);
      const auto train_start = Clock::now();
      const StepAdvantages advantages = compute_advantages(cfg, rollout, policy, comm, device);
      const UpdateFigures update = ppo_update(cfg, rollout.batch, advantages, step, schedule.total_steps, policy,
                                              optimizer, comm, device, bad_in_a_row);
      StepParts parts{&rollout, &advantages, &update, seconds_since(train_start)};
      parts.sync_seconds = source->after_update(step + 1);
      parts.step_seconds = seconds_since(step_start);
      step_start = Clock::now();
      report_and_save(cfg, step, batch, parts, *source, in, comm, stats, saver, recovery, policy, summary,
                      bad_in_a_row, link);
    }
  } catch (const StopRequested&) {
    source->stop();
    throw;
  }
  summary.steps = step;
  const Stats after = source->evaluate_at_end(step);
  summary.eval_after = greedy_accuracy(after);
  if (!after.empty() && !link) stats.log(step, after);
  summary.checkpoint = (std::filesystem::path(run_dir(cfg)) / "checkpoint").string();
  policy.save(summary.checkpoint);
  if (in.valid)
    log::info(cat("rl: held-out greedy accuracy ", format_fixed(100 * summary.eval_before, 1), "% -> ",
                  format_fixed(100 * summary.eval_after, 1), "%"));
  log::info(cat("rl: ", step, " steps, mean reward ", format_fixed(summary.first_reward, 3), " -> ",
                format_fixed(summary.last_reward, 3), "; saved ", summary.checkpoint, "; stats in ", stats.jsonl_path()));
  return summary;
}

}  // namespace areal
