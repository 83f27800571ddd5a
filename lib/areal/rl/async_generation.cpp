#include "areal/rl/async_generation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>

#include "areal/fsdp/policy.h"
#include "areal/rl/async_queue.h"
#include "areal/rl/evaluation.h"
#include "areal/rollout/weight_sync.h"
#include "areal/util/crash_point.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
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
    version = receive_weights(mail, source, model);
    eval_pending = eval_pending || (evaluates && eval_due(version));
  };
  const WeightCheck check = [&] {
    while (newer_waiting()) take_version();
    mail.progress();
    return version;
  };

  int64_t next = first_version * batch;  // the first group not started
  auto own = [&](int64_t g) { return plan.position(g) % replicas == replica; };
  int64_t rounds = 0;
  try {
    evaluate_now();
    for (;;) {
      while (next < total_groups && !own(next)) ++next;
      if (next >= total_groups) break;
      std::vector<int64_t> round;
      for (int64_t g = next; g < total_groups && static_cast<int64_t>(round.size()) < concurrent; ++g) {
        if (!own(g)) continue;
        if (!rule.may_start(g, version)) break;
        round.push_back(g);
      }
      if (round.empty()) {  // held back by the staleness rule: the next version frees it
        take_version();
        evaluate_now();
        continue;
      }
      crash_point(cat("async:generate", ++rounds).c_str());
      std::vector<std::vector<int64_t>> prompts;
      std::vector<at::Generator> sample_generators;
      for (int64_t g : round) {
        const size_t index = plan.prompt(g);
        for (int64_t s = 0; s < n_samples; ++s) {
          prompts.push_back(in.train->operator[](index).ids);
          sample_generators.push_back(answer_generator(cfg.seed, plan.step(g), static_cast<int64_t>(index), s));
        }
      }
      std::vector<Generated> answers = generate(model, prompts, in.sampling, sample_generators, nullptr, check);
      if (leader) {
        for (size_t k = 0; k < round.size(); ++k) {
          FinishedGroup group;
          group.index = round[k];
          group.prompt = static_cast<int64_t>(plan.prompt(round[k]));
          const Prompt& p = (*in.train)[static_cast<size_t>(group.prompt)];
          std::vector<RewardCall> calls;
          for (int64_t s = 0; s < n_samples; ++s) {
            group.answers.push_back(std::move(answers[k * n_samples + s]));
            const Generated& answer = group.answers.back();
            calls.push_back({&p.example, in.tokenizer->decode(answer.tokens), p.ids, answer.tokens});
          }
          group.rewards = reward.score(calls, group.reward_failures);
          mail.post(first_trainer + static_cast<int>(plan.position(round[k]) % trainers), kTagGroup,
                    encode_group(group));
        }
      }
      next = round.back() + 1;
      evaluate_now();
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
