#include "areal/rl/colocated_rollout.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <optional>

#include "areal/config/allocation.h"
#include "areal/recover/periodic_saves.h"
#include "areal/rl/advantages.h"
#include "areal/rl/batch_refill.h"
#include "areal/rl/evaluation.h"
#include "areal/rollout/rollout_model.h"
#include "areal/util/clock.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

class ColocatedRollout : public RolloutSource {
 public:
  ColocatedRollout(const Config& cfg, const RlInputs& in, const RankInfo& me, Communicator& comm, Policy& policy)
      : cfg_(cfg), in_(in), me_(me), comm_(comm), policy_(policy), last_eval_(Clock::now()) {
    const Allocation allocation = allocation_for_world(cfg, me.world_size);
    group_size_ = static_cast<int>(allocation.tensor_parallel());
    whole_experts_ = allocation.rollout.expert > 1;
    // Tensor and context parallelism: a data-parallel group's ranks take the same prompts,
    // so (seeded by prompt and sample) they generate the same answers, and train on their
    // slices of the layers or their chunks of them.
    sharing_ = allocation.actor.sharing();
    group_first_ = me.rank / group_size_ * group_size_;
    if (group_size_ > 1) group_comm_ = comm.split(me.rank / group_size_, me.rank % group_size_);
    if (in.episodic)
      episodes_.emplace(in.env.get(), group_comm_.get(), *in.tokenizer, in.tmpl, in.sampling.stop_ids, in.episodes);
  }

  bool asynchronous() const override { return false; }
  void begin(int64_t) override {}
  double after_update(int64_t) override { return 0; }
  void add_stats(Stats&) const override {}
  void stop() override {}

  StepRollout rollout(int64_t step, const std::vector<size_t>& batch) override;

  Stats evaluate_before() override { return evaluate("before training"); }
  std::optional<Stats> evaluate_after_step(int64_t steps_done, bool last) override {
    const EvaluatorConfig& e = cfg_.evaluator;  // the saver's rule (periodic_saves.h)
    if (!in_.valid || last ||
        !periodic_due(steps_done, in_.schedule.steps_per_epoch, e.freq_steps, e.freq_epochs, e.freq_secs, last_eval_,
                      comm_))
      return std::nullopt;
    return evaluate(cat("step ", steps_done).c_str());
  }
  Stats evaluate_at_end(int64_t) override { return evaluate("after training"); }

 private:
  // Generates the groups of `round_batch` (prompt indices) with the generation group,
  // appending this rank's prompts and answers to `out`. Round 0 is the step's batch;
  // later rounds refill it and sample with other generator streams.
  void generate_round(RolloutModel& slices, int64_t step, const std::vector<size_t>& round_batch, int64_t round,
                      std::vector<SharedPrompt>& prompts, std::vector<Generated>& answers, int64_t& cache_bytes);
  // DAPO's refill: rounds until batch_size groups of all ranks carry a signal.
  void refill(RolloutModel& slices, int64_t step, const std::vector<size_t>& batch, std::vector<SharedPrompt>& prompts,
              std::vector<Generated>& answers, std::vector<double>& rewards, int64_t& failures, StepRollout& out);
  // Greedy answers to every held-out prompt (each generation group its members' share):
  // eval_accuracy, the share of answers with a positive reward over all ranks; with
  // evaluator.n_samples also that many sampled answers each: eval_pass@k, eval_maj@n
  // (empty without valid_dataset). Collective.
  Stats evaluate(const char* when);

  const Config& cfg_;
  const RlInputs& in_;
  const RankInfo& me_;
  Communicator& comm_;
  Policy& policy_;
  int group_first_ = 0, group_size_ = 1;
  bool whole_experts_ = false;  // rollout.backend eT: a mixture of experts' experts whole on the group's ranks
  int64_t sharing_ = 1;         // actor.backend's t x c (generation with t = 1)
  std::unique_ptr<Communicator> group_comm_;  // the tensor-parallel group (none at t = 1)
  std::optional<EpisodeRunner> episodes_;     // multi-turn episodes
  Clock::time_point last_eval_;
};

void ColocatedRollout::generate_round(RolloutModel& slices, int64_t step, const std::vector<size_t>& round_batch,
                                      int64_t round, std::vector<SharedPrompt>& prompts,
                                      std::vector<Generated>& answers, int64_t& cache_bytes) {
  const int64_t n_samples = cfg_.gconfig.n_samples;
  std::vector<std::vector<int64_t>> prompt_ids;  // the group's, n_samples rows per prompt
  std::vector<SharedPrompt> row_prompts;
  std::vector<at::Generator> generators;
  size_t first_row = 0, mine = 0;  // this rank's answers among the group's
  for (int member = group_first_; member < group_first_ + group_size_; ++member) {
    if (member == me_.rank) first_row = prompt_ids.size();
    for (size_t i : items_of(member / static_cast<int>(sharing_), me_.world_size / static_cast<int>(sharing_),
                             round_batch.size())) {
      const size_t index = round_batch[i];
      const SharedPrompt prompt = in_.train->shared(index);
      if (member == me_.rank) {
        prompts.push_back(prompt);
        mine += n_samples;
      }
      for (int64_t s = 0; s < n_samples; ++s) {
        prompt_ids.push_back(prompt->ids);
        row_prompts.push_back(prompt);
        generators.push_back(answer_generator(cfg_.seed, step, static_cast<int64_t>(index), s + round * n_samples));
      }
    }
  }
  EpisodeHooks hooks;
  if (episodes_) hooks = episodes_->hooks([&](int64_t id) { return row_prompts[static_cast<size_t>(id)].get(); });
  std::vector<Generated> group_answers = generate(slices, prompt_ids, in_.sampling, generators, &cache_bytes, {}, hooks);
  if (episodes_)
    for (size_t r = 0; r < group_answers.size(); ++r) episodes_->complete(static_cast<int64_t>(r), group_answers[r]);
  answers.insert(answers.end(), group_answers.begin() + first_row, group_answers.begin() + first_row + mine);
}

StepRollout ColocatedRollout::rollout(int64_t step, const std::vector<size_t>& batch) {
  const auto start = Clock::now();
  StepRollout out;
  std::vector<SharedPrompt> prompts;  // this rank's
  std::vector<Generated> answers;      // theirs, n_samples per prompt
  RolloutModel slices(policy_, group_comm_.get(), policy_.compute_dtype(), at::Device(me_.device), whole_experts_);
  out.weight_bytes = slices.weight_bytes();
  generate_round(slices, step, batch, 0, prompts, answers, out.cache_bytes);
  int64_t failures = 0;
  std::vector<double> rewards =
      score_answers(prompts, cfg_.gconfig.n_samples, answers, 0, *in_.tokenizer, *in_.reward, failures);
  if (cfg_.actor.dynamic_sampling && !cfg_.dynamic_bs)
    refill(slices, step, batch, prompts, answers, rewards, failures, out);
  out.batch = pack(prompts, cfg_.gconfig.n_samples, answers, *in_.tokenizer);
  out.batch.rewards = std::move(rewards);
  out.batch.reward_failures = failures;
  out.seconds = seconds_since(start);
  return out;
}

void ColocatedRollout::refill(RolloutModel& slices, int64_t step, const std::vector<size_t>& batch,
                              std::vector<SharedPrompt>& prompts, std::vector<Generated>& answers,
                              std::vector<double>& rewards, int64_t& failures, StepRollout& out) {
  const int64_t n_samples = cfg_.gconfig.n_samples;
  out.refilled = true;
  // Ranks take their groups in round order, then rank order.
  const int64_t wanted = static_cast<int64_t>(batch.size());  // a partial last batch wants its own size
  int64_t accepted = 0;
  size_t round_first = 0;                 // the round's first prompt among this rank's
  std::vector<size_t> drawn = batch;      // the step's prompts so far (all ranks'): not drawn again
  for (int64_t round = 0;; ++round) {
    if (round > 0) {
      const int64_t missing = (wanted - accepted + me_.world_size - 1) / me_.world_size * me_.world_size;
      const std::vector<size_t> more_prompts = refill_prompts(cfg_.seed, step, round, missing, in_.train->size(), drawn);
      drawn.insert(drawn.end(), more_prompts.begin(), more_prompts.end());
      generate_round(slices, step, more_prompts, round, prompts, answers, out.cache_bytes);
      const std::vector<double> more = score_answers(prompts, n_samples, answers, round_first, *in_.tokenizer,
                                                     *in_.reward, failures);
      rewards.insert(rewards.end(), more.begin(), more.end());
    }
    std::vector<double> round_scores;
    for (size_t i = round_first * n_samples; i < answers.size(); ++i)
      round_scores.push_back(answer_score(rewards[i], static_cast<int64_t>(answers[i].tokens.size()), cfg_.actor,
                                          cfg_.gconfig.max_new_tokens));
    const std::vector<bool> signal = group_signals(round_scores, n_samples);
    at::Tensor counts = at::zeros({me_.world_size}, at::kLong);
    counts[me_.rank] = static_cast<int64_t>(std::count(signal.begin(), signal.end(), true));
    comm_.all_reduce(counts, ReduceOp::Sum);
    const std::vector<int64_t> all(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + me_.world_size);
    int64_t take = groups_taken(all, me_.rank, wanted - accepted);
    for (bool has_signal : signal) {
      const bool taken = has_signal && take > 0;
      take -= taken;
      out.refill_kept.push_back(taken ? 1.0f : 0.0f);
    }
    accepted = std::min(wanted, accepted + counts.sum().item<int64_t>());
    round_first = prompts.size();
    out.refill_rounds = round;
    if (accepted == wanted || round == kMaxRefillRounds) break;
  }
  if (accepted < wanted)
    log::warn(cat("step ", step + 1, ": ", accepted, " of ", wanted, " groups carry a signal after ", kMaxRefillRounds,
                  " refill rounds; the step trains on ", accepted > 0 ? "those" : "all (none has a signal)"));
  if (accepted == 0) std::fill(out.refill_kept.begin(), out.refill_kept.end(), 1.0f);  // AReaL's rule
}

Stats ColocatedRollout::evaluate(const char* when) {
  if (!in_.valid) return {};
  const auto start = Clock::now();
  last_eval_ = start;
  const PromptDataset& data = *in_.valid;
  RolloutModel slices(policy_, group_comm_.get(), policy_.compute_dtype(), at::Device(me_.device), whole_experts_);
  std::vector<size_t> items;  // the group's
  std::vector<bool> mine;     // scored here: each answer is counted by the rank it belongs to
  group_items(group_first_, group_size_, me_.rank, me_.world_size, data.size(), items, mine);
  EpisodeRunner* episodes = episodes_ ? &*episodes_ : nullptr;
  const EvalCounts counts = greedy_eval(slices, data, items, mine, in_.sampling, *in_.tokenizer, *in_.reward,
                                        cfg_.valid_dataset.batch_size, episodes);
  at::Tensor totals = at::tensor({counts.correct, counts.scored, counts.tool_calls}, at::kDouble);
  comm_.all_reduce(totals, ReduceOp::Sum);
  const double accuracy = totals[0].item<double>() / std::max(1.0, totals[1].item<double>());
  Stats figures{{"eval_accuracy", accuracy}};
  std::string line = cat("greedy accuracy ", format_fixed(100 * accuracy, 1), "%");
  if (const int64_t n = cfg_.evaluator.n_samples; n > 0) {  // the samples --job eval draws (evaluation.h)
    const auto sampled = sample_eval(slices, data, items, mine, in_.sampling, n, cfg_.seed, *in_.tokenizer,
                                     *in_.reward, cfg_.valid_dataset.batch_size, episodes);
    for (const auto& [key, value] : sampled_figures(cfg_.reward_fn, n, sampled, comm_)) {
      figures.push_back({key, value});
      line += cat(", ", key.substr(5), " ", format_fixed(100 * value, 1), "%");
    }
  }
  const std::string tools = episodes_ ? cat(", ", format_fixed(totals[2].item<double>() / std::max(1.0, totals[1].item<double>()), 2),
                                            " tool calls per episode")
                                      : "";
  log::info(cat("eval (", when, "): ", line, " on ", data.size(), " held-out prompts", tools, " (",
                format_fixed(seconds_since(start), 1), " s)"));
  return figures;
}

}  // namespace

std::unique_ptr<RolloutSource> make_colocated_rollout(const Config& cfg, const RlInputs& inputs, const RankInfo& me,
                                                      Communicator& comm, Policy& policy) {
  return std::make_unique<ColocatedRollout>(cfg, inputs, me, comm, policy);
}

}  // namespace areal
