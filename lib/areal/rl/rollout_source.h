// Where an RL step's answers come from: the one place the synchronous and the
// asynchronous shapes differ (rl_trainer.h). Colocated (colocated_rollout.h): this
// rank's generation group generates and scores the step's prompts, with DAPO's refill,
// and evaluates on the held-out set itself. Asynchronous (async_rollout.h): the groups
// come from the queue, generated and scored on the generation ranks, the new weights go
// back after every update, and the held-out scores come from generation replica 0.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "areal/rl/rollout_batch.h"
#include "areal/stats/stats_logger.h"

namespace areal {

// The rollout stage's output on this rank.
struct StepRollout {
  Rollout batch;                   // the answers with their raw rewards
  bool refilled = false;           // DAPO's refill ran (colocated, dynamic_bs false)
  std::vector<float> refill_kept;  // then 1 for each group that joins the batch
  int64_t refill_rounds = 0;
  int64_t weight_bytes = 0, cache_bytes = 0;  // the rollout's memory on this rank (colocated)
  double seconds = 0;              // this rank's time in the stage (asynchronous: its wait for the queue)
};

class RolloutSource {
 public:
  virtual ~RolloutSource() = default;
  virtual bool asynchronous() const = 0;
  // Before the first step the loop runs (`steps_done`: where it starts). Collective.
  virtual void begin(int64_t steps_done) = 0;
  // This rank's answers to the step's prompts (`batch`: indices into the training set).
  virtual StepRollout rollout(int64_t step, const std::vector<size_t>& batch) = 0;
  // After the step's update; returns this rank's seconds in it (the weights' sync).
  virtual double after_update(int64_t steps_done) = 0;
  // A held-out evaluation's figures for the stats rows: eval_accuracy (greedy), and
  // with evaluator.n_samples eval_pass@k and eval_maj@n. After step `steps_done`: when an
  // evaluation is due and its figures belong in the step's row (colocated); the
  // asynchronous source logs the scores that arrived on its own and returns nothing.
  virtual std::optional<Stats> evaluate_after_step(int64_t steps_done, bool last) = 0;
  // Before training (empty: none, or it comes later) and after the last step (empty:
  // none; the asynchronous source: eval_accuracy alone, already logged).
  virtual Stats evaluate_before() = 0;
  virtual Stats evaluate_at_end(int64_t steps_done) = 0;
  // What the statistics add for this shape (asynchronous: the queue's length here).
  virtual void add_stats(Stats& extra) const = 0;
  // A stop (a signal): whatever the other side must hear.
  virtual void stop() = 0;
};

}  // namespace areal
