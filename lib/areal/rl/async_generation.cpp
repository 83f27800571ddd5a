#include "areal/rl/async_generation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <map>

#include "areal/fsdp/policy.h"
#include "areal/rl/async_queue.h"
#include "areal/rl/evaluation.h"
#include "areal/rollout/weight_sync.h"
#include "areal/util/crash_point.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/stop_signal.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// Where the run's groups come from: group g is position g % B of step g / B's batch.
class GroupPlan {
 public:
  GroupPlan(const TrainingSchedule& schedule, int64_t batch) : schedule_(schedule), batch_(batch) {}
  int64_t step(int64_t group) const { return group / batch_; }
  int64_t position(int64_t group) const { return group % batch_; }
  size_t prompt(int64_t group) {
    const int64_t step = group / batch_, epoch = step / schedule_.steps_per_epoch;
    if (epoch != epoch_) {
      plan_ = plan_epoch(schedule_.epochs, epoch);
      epoch_ = epoch;
    }
    return plan_.batches.at(static_cast<size_t>(step % schedule_.steps_per_epoch)).at(static_cast<size_t>(group % batch_));
  }

 private:
  const TrainingSchedule& schedule_;
  int64_t batch_;
  int64_t epoch_ = -1;
  EpochPlan plan_;
};

}  // namespace

void run_generation(const Config& cfg, const RlInputs& in, const ModelConfig& model_config, const RankInfo& me,
                    const Allocation& a, Communicator& generators, Mailbox& mail) {
  const int64_t replicas = a.rollout.data, t = a.rollout.tensor, trainers = a.actor.ranks();
  const int first_trainer = static_cast<int>(a.generation_ranks());
  const int replica = static_cast<int>(me.rank / t), member = static_cast<int>(me.rank % t);
  const bool leader = member == 0;
  std::unique_ptr<Communicator> tp = t > 1 ? generators.split(replica, member) : nullptr;
  const int source = first_trainer + static_cast<int>(me.rank % trainers);  // the trainer that serves this rank

  const int64_t batch = cfg.train_dataset.batch_size, n_samples = cfg.gconfig.n_samples;
  const int64_t total_steps = in.schedule.total_steps, total_groups = total_steps * batch;
  const RolloutConfig& rc = cfg.rollout;
  const StalenessRule rule{batch, rc.max_head_offpolicyness, rc.queue_size};
  const int64_t concurrent_all = rc.max_concurrent_rollouts > 0 ? rc.max_concurrent_rollouts : batch;
  const int64_t concurrent = std::max<int64_t>(1, (concurrent_all + replicas - 1) / replicas);
  GroupPlan plan(in.schedule, batch);
  Rewarder& reward = *in.reward;

  // A stop signal (Slurm sends it to every process of the step) does not end this rank:
  // it is relayed to the trainers, who stop after their step with a recover checkpoint
  // and then tell the generation ranks to stop (the job exits kExitStopped).
  install_stop_signal_handlers();
  bool stop_relayed = false;
  auto relay_stop = [&] {
    if (stop_relayed || stop_signal_received() == 0) return;
    mail.post(source, kTagStop, encode_stop(stop_signal_received()));
    stop_relayed = true;
  };

  int64_t version = 0;
  RolloutModel model = receive_first_weights(mail, source, model_config, tp.get(), dtype_from_name(cfg.actor.dtype),
                                             at::Device(me.device), version);
  const int64_t first_version = version;
  log::info(cat("generation replica ", replica, ": weights of step ", version, " taken; up to ", concurrent,
                " groups at once, at most ", rule.eta, " versions behind"));

  // Held-out scores: replica 0, at the versions the evaluator asks for.
  const bool evaluates = replica == 0 && in.valid != nullptr;
  const EvaluatorConfig& ec = cfg.evaluator;
  auto eval_due = [&](int64_t v) {
    return v == total_steps || (v == 0 && first_version == 0) || (ec.freq_steps > 0 && v % ec.freq_steps == 0) ||
           (ec.freq_epochs > 0 && v % (ec.freq_epochs * in.schedule.steps_per_epoch) == 0);
  };
  bool eval_pending = evaluates && eval_due(version);
  auto evaluate_now = [&] {
    if (!eval_pending) return;
    eval_pending = false;
    sleep_point(cat("async:eval", version));  // tests: a slow evaluation
    std::vector<size_t> items(in.valid->size());
    for (size_t i = 0; i < items.size(); ++i) items[i] = i;
    const std::vector<bool> mine(items.size(), leader);
    const EvalCounts c = greedy_eval(model, *in.valid, items, mine, in.sampling, *in.tokenizer, reward,
                                     cfg.valid_dataset.batch_size);
    if (leader) mail.post(first_trainer, kTagEval, encode_eval({version, c.correct / std::max(1.0, c.scored)}));
  };

  // New weights: the replica's first rank looks, the others follow its answer, so the
  // whole replica takes a version at the same forward step.
  auto newer_waiting = [&] {
    bool waiting = leader && weights_waiting(mail, source);
    if (tp) {
      at::Tensor flag = at::tensor({waiting ? 1.0 : 0.0}, at::kDouble);
      tp->broadcast(flag, 0);
      waiting = flag.item<double>() > 0;
    }
    return waiting;
  };
  auto take_version = [&] {
    relay_stop();
    crash_point(cat("async:version", version + 1));
    version = receive_weights(mail, source, model);
    eval_pending = eval_pending || (evaluates && eval_due(version));
  };
  const WeightCheck check = [&] {
    relay_stop();
    while (newer_waiting()) take_version();
    mail.progress();
    return version;
  };

  // The stream of prompts: a replica's groups in order, each as n_samples answers, while
  // the staleness rule and max_concurrent_rollouts let them start. The answers of a
  // group may start in different refills; the group is scored and posted when its last
  // answer finishes.
  struct InFlight {
    std::vector<Generated> answers;
    int64_t finished = 0;
  };
  std::map<int64_t, InFlight> in_flight;               // by group
  std::vector<std::pair<int64_t, int64_t>> started;    // answer id (of the current stream) -> (group, sample)
  int64_t next = first_version * batch, next_sample = 0;  // the next answer to start
  auto own = [&](int64_t g) { return plan.position(g) % replicas == replica; };
  auto skip_others = [&] {
    while (next < total_groups && !own(next)) ++next;
  };
  PromptSource feed;
  feed.next = [&](std::vector<int64_t>& prompt, at::Generator& generator) {
    if (next_sample == 0) {  // a new group: may it start?
      skip_others();
      if (next >= total_groups || eval_pending || !rule.may_start(next, version) ||
          static_cast<int64_t>(in_flight.size()) >= concurrent)
        return false;
      crash_point(cat("async:group", next + 1));
      in_flight[next].answers.resize(static_cast<size_t>(n_samples));
    }
    const size_t index = plan.prompt(next);
    prompt = (*in.train)[index].ids;
    generator = answer_generator(cfg.seed, plan.step(next), static_cast<int64_t>(index), next_sample);
    started.emplace_back(next, next_sample);
    if (++next_sample == n_samples) {
      next_sample = 0;
      ++next;
    }
    return true;
  };
  feed.finished = [&](int64_t id, Generated answer) {
    const auto [g, sample] = started.at(static_cast<size_t>(id));
    InFlight& group = in_flight.at(g);
    group.answers[static_cast<size_t>(sample)] = std::move(answer);
    if (++group.finished < n_samples) return;
    if (leader) {
      FinishedGroup done;
      done.index = g;
      done.prompt = static_cast<int64_t>(plan.prompt(g));
      done.answers = std::move(group.answers);
      const Prompt& p = (*in.train)[static_cast<size_t>(done.prompt)];
      std::vector<RewardCall> calls;
      for (const Generated& a : done.answers) calls.push_back({&p.example, in.tokenizer->decode(a.tokens), p.ids, a.tokens});
      done.rewards = reward.score(calls, done.reward_failures);
      mail.post(first_trainer + static_cast<int>(plan.position(g) % trainers), kTagGroup, encode_group(done));
    }
    in_flight.erase(g);
  };
  // At most rollout.max_running_requests answers decode at once (else every answer of
  // the groups in flight), with room for the longest prompt of the data.
  const int64_t longest = longest_prompt(*in.train);
  const int64_t max_rows = rc.max_running_requests > 0 ? rc.max_running_requests : concurrent * n_samples;
  try {
    evaluate_now();
    for (;;) {
      // Runs until the source has nothing to start and every answer finished: the
      // staleness rule holds the next group back, an evaluation is due, or all are out.
      started.clear();  // answer ids count from 0 in each stream; none is in flight now
      generate_stream(model, in.sampling, longest, max_rows, feed, check);
      evaluate_now();
      skip_others();
      if (next >= total_groups) break;
      if (!rule.may_start(next, version)) take_version();  // the next version frees it
    }
    // Every group is out; the trainers still send a version after each step.
    while (version < total_steps) {
      take_version();
      evaluate_now();
    }
  } catch (const StopRequested&) {
    if (leader)
      for (int k = 0; k < trainers; ++k) mail.post(first_trainer + k, kTagGroup, encode_done());
    mail.flush();
    throw;
  }
  if (leader)
    for (int k = 0; k < trainers; ++k) mail.post(first_trainer + k, kTagGroup, encode_done());
  mail.flush();
}

}  // namespace areal
