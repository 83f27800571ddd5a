#include "areal/rl/async_rollout.h"

#include <chrono>

#include "areal/rl/async_queue.h"
#include "areal/rollout/weight_sync.h"
#include "areal/util/clock.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

class AsyncRollout : public RolloutSource {
 public:
  AsyncRollout(const Config& cfg, const RlInputs& in, const GenerationLink& link, int train_rank, int trainers,
               Policy& policy, StatsLogger& stats, RlSummary& summary)
      : cfg_(cfg),
        in_(in),
        link_(link),
        first_trainer_(train_rank == 0),
        policy_(policy),
        stats_(stats),
        summary_(summary),
        inbox_(*link.mail, cfg.train_dataset.batch_size, train_rank, trainers, link.replicas) {}

  bool asynchronous() const override { return true; }

  // The generation ranks start from the weights of the step the run is at.
  void begin(int64_t steps_done) override { send(steps_done); }

  StepRollout rollout(int64_t step, const std::vector<size_t>&) override {
    StepRollout out;
    out.batch = pack_groups(inbox_.take_step(step, out.seconds), *in_.train, cfg_.gconfig.n_samples, *in_.tokenizer);
    return out;
  }

  // The new weights go to the generation ranks at once.
  double after_update(int64_t steps_done) override {
    const auto start = Clock::now();
    send(steps_done);
    return seconds_since(start);
  }

  std::optional<Stats> evaluate_after_step(int64_t, bool) override {
    take_scores(-1);
    return std::nullopt;
  }
  Stats evaluate_before() override { return {}; }  // generation replica 0 sends it
  Stats evaluate_at_end(int64_t steps_done) override {
    const double accuracy = take_scores(steps_done);
    inbox_.drain();
    if (accuracy < 0) return {};
    return {{"eval_accuracy", accuracy}};
  }
  void add_stats(Stats& extra) const override {
    extra.push_back({"queue_groups_held", static_cast<double>(inbox_.held())});
  }
  // The generation ranks stop too, and what they sent is taken.
  void stop() override {
    send_stop(*link_.mail, link_.served);
    inbox_.drain();
  }

 private:
  void send(int64_t version) { send_weights(policy_, *link_.mail, link_.served, version, policy_.compute_dtype()); }
  // Logs the held-out scores that arrived (on the first trainer); `wait_for` >= 0 waits
  // for that version's and returns it.
  double take_scores(int64_t wait_for);

  const Config& cfg_;
  const RlInputs& in_;
  const GenerationLink& link_;
  bool first_trainer_;
  Policy& policy_;
  StatsLogger& stats_;
  RlSummary& summary_;
  GroupInbox inbox_;
};

double AsyncRollout::take_scores(int64_t wait_for) {
  double wanted = -1;
  if (!in_.valid || !first_trainer_) return wanted;
  for (;;) {
    std::optional<Message> m = wait_for >= 0 ? link_.mail->receive(kTagEval, kEvalSource, "the held-out score")
                                             : link_.mail->poll(kTagEval, kEvalSource);
    if (!m) return wanted;
    const EvalScore score = decode_eval(m->bytes);
    log::info(cat("eval (weights of step ", score.version, ", on the generation ranks): greedy accuracy ",
                  format_fixed(100 * score.accuracy, 1), "% on ", in_.valid->size(), " held-out prompts"));
    stats_.log(score.version, {{"eval_accuracy", score.accuracy}});
    if (score.version == 0) summary_.eval_before = score.accuracy;
    if (score.version == wait_for) return score.accuracy;
  }
}

}  // namespace

std::unique_ptr<RolloutSource> make_async_rollout(const Config& cfg, const RlInputs& inputs, const GenerationLink& link,
                                                  int train_rank, int trainers, Policy& policy, StatsLogger& stats,
                                                  RlSummary& summary) {
  return std::make_unique<AsyncRollout>(cfg, inputs, link, train_rank, trainers, policy, stats, summary);
}

}  // namespace areal
