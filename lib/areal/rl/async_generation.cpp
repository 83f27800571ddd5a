#include "areal/rl/async_generation.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

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

// One generation rank's part of its replica: takes versions of the weights, generates
// the replica's groups while the staleness rule lets them start, scores and posts each
// finished group (the replica's first rank), and evaluates on replica 0.
class GenerationReplica {
 public:
  GenerationReplica(const Config& cfg, const RlInputs& in, const ModelConfig& model_config, const RankInfo& me,
                    const Allocation& a, Communicator& generators, Mailbox& mail);
  void run();

 private:
  // A stop signal (Slurm sends it to every process of the step) does not end this rank:
  // it is relayed to the trainers, who stop after their step with a recover checkpoint
  // and then tell the generation ranks to stop (the job exits kExitStopped).
  void relay_stop();
  bool eval_due(int64_t v) const;
  void evaluate_now();
  // New weights: the replica's first rank looks, the others follow its answer, so the
  // whole replica takes a version at the same forward step.
  bool newer_waiting();
  void take_version();
  bool own(int64_t g) { return plan_.position(g) % replicas_ == replica_; }
  void skip_others() {
    while (next_ < total_groups_ && !own(next_)) ++next_;
  }
  // The stream of prompts: the replica's groups in order, each as n_samples answers.
  bool next_prompt(std::vector<int64_t>& prompt, at::Generator& generator);
  // The answers of a group may start in different refills; the group is scored and
  // posted when its last answer finishes.
  void answer_finished(int64_t id, Generated answer);
  void post_done();

  const Config& cfg_;
  const RlInputs& in_;
  Mailbox& mail_;
  const int64_t replicas_, trainers_, batch_, n_samples_, total_steps_, total_groups_, concurrent_;
  const int first_trainer_, replica_, source_;  // source_: the trainer that serves this rank
  const bool leader_;
  const StalenessRule rule_;
  std::unique_ptr<Communicator> tp_;
  std::optional<EpisodeRunner> episodes_;  // multi-turn episodes
  GroupPlan plan_;
  int64_t version_ = 0, first_version_ = 0;
  std::optional<RolloutModel> model_;
  bool evaluates_ = false, eval_pending_ = false, stop_relayed_ = false;
  struct InFlight {
    std::vector<Generated> answers;
    int64_t finished = 0;
  };
  std::map<int64_t, InFlight> in_flight_;             // by group
  std::vector<std::pair<int64_t, int64_t>> started_;  // answer id (of the current stream) -> (group, sample)
  std::vector<SharedPrompt> started_prompts_;         // answer id -> its prompt
  int64_t next_ = 0, next_sample_ = 0;                // the next answer to start
};

GenerationReplica::GenerationReplica(const Config& cfg, const RlInputs& in, const ModelConfig& model_config,
                                     const RankInfo& me, const Allocation& a, Communicator& generators, Mailbox& mail)
    : cfg_(cfg),
      in_(in),
      mail_(mail),
      replicas_(a.rollout.data),
      trainers_(a.actor.ranks()),
      batch_(cfg.train_dataset.batch_size),
      n_samples_(cfg.gconfig.n_samples),
      total_steps_(in.schedule.total_steps),
      total_groups_(total_steps_ * batch_),
      concurrent_(std::max<int64_t>(
          1, ((cfg.rollout.max_concurrent_rollouts > 0 ? cfg.rollout.max_concurrent_rollouts : batch_) + replicas_ - 1) /
                 replicas_)),
      first_trainer_(static_cast<int>(a.generation_ranks())),
      replica_(static_cast<int>(me.rank / a.rollout.tensor)),
      source_(first_trainer_ + static_cast<int>(me.rank % trainers_)),
      leader_(me.rank % a.rollout.tensor == 0),
      rule_{batch_, cfg.rollout.max_head_offpolicyness, cfg.rollout.queue_size},
      plan_(in.schedule, batch_) {
  const int64_t t = a.rollout.tensor;
  if (t > 1) tp_ = generators.split(replica_, static_cast<int>(me.rank % t));
  if (in.episodic) episodes_.emplace(in.env.get(), tp_.get(), *in.tokenizer, in.tmpl, in.sampling.stop_ids, in.episodes);
  install_stop_signal_handlers();
  model_.emplace(receive_first_weights(mail_, source_, model_config, tp_.get(), dtype_from_name(cfg.actor.dtype),
                                       at::Device(me.device), version_, a.rollout.expert > 1));
  first_version_ = version_;
  next_ = first_version_ * batch_;
  log::info(cat("generation replica ", replica_, ": weights of step ", version_, " taken; up to ", concurrent_,
                " groups at once, at most ", rule_.eta, " versions behind"));
  // Held-out scores: replica 0, at the versions the evaluator asks for.
  evaluates_ = replica_ == 0 && in.valid != nullptr;
  eval_pending_ = evaluates_ && eval_due(version_);
}

void GenerationReplica::relay_stop() {
  if (stop_relayed_ || stop_signal_received() == 0) return;
  mail_.post(source_, kTagStop, encode_stop(stop_signal_received()));
  stop_relayed_ = true;
}

bool GenerationReplica::eval_due(int64_t v) const {
  const EvaluatorConfig& ec = cfg_.evaluator;
  return v == total_steps_ || (v == 0 && first_version_ == 0) || (ec.freq_steps > 0 && v % ec.freq_steps == 0) ||
         (ec.freq_epochs > 0 && v % (ec.freq_epochs * in_.schedule.steps_per_epoch) == 0);
}

void GenerationReplica::evaluate_now() {
  if (!eval_pending_) return;
  eval_pending_ = false;
  sleep_point(cat("async:eval", version_));  // tests: a slow evaluation
  std::vector<size_t> items(in_.valid->size());
  for (size_t i = 0; i < items.size(); ++i) items[i] = i;
  const std::vector<bool> mine(items.size(), leader_);
  const EvalCounts c = greedy_eval(*model_, *in_.valid, items, mine, in_.sampling, *in_.tokenizer, *in_.reward,
                                   cfg_.valid_dataset.batch_size, episodes_ ? &*episodes_ : nullptr);
  if (leader_) mail_.post(first_trainer_, kTagEval, encode_eval({version_, c.correct / std::max(1.0, c.scored)}));
}

bool GenerationReplica::newer_waiting() {
  bool waiting = leader_ && weights_waiting(mail_, source_);
  if (tp_) {
    at::Tensor flag = at::tensor({waiting ? 1.0 : 0.0}, at::kDouble);
    tp_->broadcast(flag, 0);
    waiting = flag.item<double>() > 0;
  }
  return waiting;
}

void GenerationReplica::take_version() {
  relay_stop();
  crash_point(cat("async:version", version_ + 1));
  version_ = receive_weights(mail_, source_, *model_);
  eval_pending_ = eval_pending_ || (evaluates_ && eval_due(version_));
}

bool GenerationReplica::next_prompt(std::vector<int64_t>& prompt, at::Generator& generator) {
  if (next_sample_ == 0) {  // a new group: may it start?
    skip_others();
    if (next_ >= total_groups_ || eval_pending_ || !rule_.may_start(next_, version_) ||
        static_cast<int64_t>(in_flight_.size()) >= concurrent_)
      return false;
    crash_point(cat("async:group", next_ + 1));
    in_flight_[next_].answers.resize(static_cast<size_t>(n_samples_));
  }
  const size_t index = plan_.prompt(next_);
  // The group's answers share one read of their prompt.
  started_prompts_.push_back(next_sample_ > 0 && !started_prompts_.empty() ? started_prompts_.back()
                                                                           : in_.train->shared(index));
  prompt = started_prompts_.back()->ids;
  generator = answer_generator(cfg_.seed, plan_.step(next_), static_cast<int64_t>(index), next_sample_);
  started_.emplace_back(next_, next_sample_);
  if (++next_sample_ == n_samples_) {
    next_sample_ = 0;
    ++next_;
  }
  return true;
}

void GenerationReplica::answer_finished(int64_t id, Generated answer) {
  const auto [g, sample] = started_.at(static_cast<size_t>(id));
  InFlight& group = in_flight_.at(g);
  group.answers[static_cast<size_t>(sample)] = std::move(answer);
  if (++group.finished < n_samples_) return;
  if (leader_) {
    FinishedGroup done;
    done.index = g;
    done.prompt = static_cast<int64_t>(plan_.prompt(g));
    done.answers = std::move(group.answers);
    const Prompt p = (*in_.train)[static_cast<size_t>(done.prompt)];
    if (episodes_) {  // episodes: their environment's rewards
      for (const Generated& a : done.answers) done.rewards.push_back(a.reward);
    } else {
      std::vector<RewardCall> calls;
      for (const Generated& a : done.answers)
        calls.push_back({&p.example, in_.tokenizer->decode(a.tokens), p.ids, a.tokens});
      done.rewards = in_.reward->score(calls, done.reward_failures);
    }
    mail_.post(first_trainer_ + static_cast<int>(plan_.position(g) % trainers_), kTagGroup, encode_group(done));
  }
  in_flight_.erase(g);
}

void GenerationReplica::post_done() {
  if (leader_)
    for (int64_t k = 0; k < trainers_; ++k) mail_.post(first_trainer_ + static_cast<int>(k), kTagGroup, encode_done());
  mail_.flush();
}

void GenerationReplica::run() {
  PromptSource feed;
  feed.next = [this](std::vector<int64_t>& prompt, at::Generator& generator) { return next_prompt(prompt, generator); };
  feed.finished = [this](int64_t id, Generated answer) {
    if (episodes_) episodes_->complete(id, answer);
    answer_finished(id, std::move(answer));
  };
  const WeightCheck check = [this] {
    relay_stop();
    while (newer_waiting()) take_version();
    mail_.progress();
    return version_;
  };
  // At most rollout.max_running_requests answers decode at once (else every answer of
  // the groups in flight), with room for the longest prompt of the data.
  const int64_t longest = longest_prompt(*in_.train);
  const int64_t max_rows =
      cfg_.rollout.max_running_requests > 0 ? cfg_.rollout.max_running_requests : concurrent_ * n_samples_;
  try {
    evaluate_now();
    for (;;) {
      // Runs until the source has nothing to start and every answer finished: the
      // staleness rule holds the next group back, an evaluation is due, or all are out.
      started_.clear();  // answer ids count from 0 in each stream; none is in flight now
      started_prompts_.clear();
      if (episodes_)
        feed.episodes = episodes_->hooks([this](int64_t id) {
          return started_prompts_.at(static_cast<size_t>(id)).get();
        });
      generate_stream(*model_, in_.sampling, longest, max_rows, feed, check);
      evaluate_now();
      skip_others();
      if (next_ >= total_groups_) break;
      if (!rule_.may_start(next_, version_)) take_version();  // the next version frees it
    }
    // Every group is out; the trainers still send a version after each step.
    while (version_ < total_steps_) {
      take_version();
      evaluate_now();
    }
  } catch (const StopRequested&) {
    post_done();
    throw;
  }
  post_done();
}

}  // namespace

void run_generation(const Config& cfg, const RlInputs& in, const ModelConfig& model_config, const RankInfo& me,
                    const Allocation& a, Communicator& generators, Mailbox& mail) {
  GenerationReplica(cfg, in, model_config, me, a, generators, mail).run();
}

}  // namespace areal
