#include "areal/rl/rl_trainer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include "areal/config/allocation.h"
#include "areal/config/run_paths.h"
#include "areal/fsdp/policy.h"
#include "areal/optim/adamw.h"
#include "areal/optim/lr_schedule.h"
#include "areal/recover/run_recovery.h"
#include "areal/rl/advantages.h"
#include "areal/rl/async_queue.h"
#include "areal/rl/batch_refill.h"
#include "areal/rl/evaluation.h"
#include "areal/rollout/weight_sync.h"
#include "areal/rollout/generation.h"
#include "areal/fsdp/micro_batches.h"
#include "areal/recover/periodic_saves.h"
#include "areal/rl/ppo_loss.h"
#include "areal/data/prompt_dataset.h"
#include "areal/reward/reward.h"
#include "areal/stats/stats_logger.h"
#include "areal/text/tokenizer.h"
#include "areal/util/crash_point.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/memory.h"
#include "areal/util/stop_signal.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

constexpr int kMaxBadStepsInARow = 3;  // non-finite losses in a row before the job stops

// This rank's answers of one step, laid out for the engine. Targets are ids[:, 1:];
// position t of the [rows, L - 1] tensors predicts token t + 1.
struct Rollout {
  at::Tensor ids;        // [rows, L] prompt + answer, right-padded
  at::Tensor loss_mask;  // [rows, L - 1] 1 where the target is an answer token
  at::Tensor old_logp;   // [rows, L - 1] behaviour log-probs of the answer tokens
  std::vector<int64_t> lengths;  // real tokens per row (prompt + answer)
  std::vector<int64_t> answer_lengths;
  std::vector<float> truncated_rows;  // 1 where the answer hit max_new_tokens without a stop token
  std::vector<double> rewards;   // raw rewards
  std::vector<int64_t> head_versions;  // asynchronous RL: the weight version of each answer's first token
  int64_t answer_tokens = 0, longest_answer = 0, truncated = 0, reward_failures = 0;
};

// The raw reward of each answer (n_samples per prompt) of prompts [first_prompt, end).
std::vector<double> score_answers(const std::vector<const Prompt*>& prompts, int64_t n_samples,
                                  const std::vector<Generated>& answers, size_t first_prompt, const Tokenizer& tokenizer,
                                  Rewarder& reward, int64_t& failures) {
  std::vector<RewardCall> calls;
  for (size_t i = first_prompt * n_samples; i < answers.size(); ++i) {
    const Prompt& prompt = *prompts[i / n_samples];
    calls.push_back({&prompt.example, tokenizer.decode(answers[i].tokens), prompt.ids, answers[i].tokens});
  }
  return reward.score(calls, failures);
}

// Lays out the answers; the caller fills in the rewards.
Rollout pack(const std::vector<const Prompt*>& prompts, int64_t n_samples, const std::vector<Generated>& answers,
             const Tokenizer& tokenizer) {
  Rollout r;
  const int64_t rows = static_cast<int64_t>(answers.size());
  int64_t longest = 0;
  for (int64_t i = 0; i < rows; ++i) {
    r.lengths.push_back(static_cast<int64_t>(prompts[i / n_samples]->ids.size() + answers[i].tokens.size()));
    longest = std::max(longest, r.lengths.back());
  }
  r.ids = at::full({rows, longest}, tokenizer.pad_id(), at::kLong);
  r.loss_mask = at::zeros({rows, longest - 1}, at::kFloat);
  r.old_logp = at::zeros({rows, longest - 1}, at::kFloat);
  for (int64_t i = 0; i < rows; ++i) {
    const Prompt& prompt = *prompts[i / n_samples];
    const Generated& answer = answers[i];
    const int64_t p = static_cast<int64_t>(prompt.ids.size()), a = static_cast<int64_t>(answer.tokens.size());
    r.ids[i].narrow(0, 0, p).copy_(at::tensor(prompt.ids, at::kLong));
    if (a > 0) {
      r.ids[i].narrow(0, p, a).copy_(at::tensor(answer.tokens, at::kLong));
      r.loss_mask[i].narrow(0, p - 1, a).fill_(1);
      r.old_logp[i].narrow(0, p - 1, a).copy_(at::tensor(answer.logprobs, at::kFloat));
    }
    r.answer_tokens += a;
    r.answer_lengths.push_back(a);
    r.truncated_rows.push_back(answer.truncated ? 1.0f : 0.0f);
    r.longest_answer = std::max(r.longest_answer, a);
    r.truncated += answer.truncated;
    if (!answer.versions.empty()) r.head_versions.push_back(answer.versions.front());
  }
  return r;
}

// Asynchronous RL: this rank's groups of a step as a rollout, scored on the generation side.
Rollout pack_groups(const std::vector<FinishedGroup>& groups, const PromptDataset& train, int64_t n_samples,
                    const Tokenizer& tokenizer) {
  std::vector<const Prompt*> prompts;
  std::vector<Generated> answers;
  std::vector<double> rewards;
  int64_t failures = 0;
  for (const FinishedGroup& g : groups) {
    if (static_cast<int64_t>(g.answers.size()) != n_samples)
      throw std::runtime_error(cat("group ", g.index, " has ", g.answers.size(), " answers, not gconfig.n_samples = ",
                                   n_samples));
    prompts.push_back(&train[static_cast<size_t>(g.prompt)]);
    answers.insert(answers.end(), g.answers.begin(), g.answers.end());
    rewards.insert(rewards.end(), g.rewards.begin(), g.rewards.end());
    failures += g.reward_failures;
  }
  Rollout r = pack(prompts, n_samples, answers, tokenizer);
  r.rewards = std::move(rewards);
  r.reward_failures = failures;
  return r;
}

PaddedSequences sequences_of(const Rollout& r) { return {r.ids, r.lengths}; }

// Log-probs of the rollout's targets under the policy's `weights` without a graph:
// [rows, L - 1] on the CPU, in n_chunks chunks of micro-batches (actor.mb_spec).
// Collective.
at::Tensor score_rollout(Policy& policy, PolicyWeights weights, const Rollout& r, int64_t n_chunks,
                         int64_t max_tokens_per_mb, double temperature, const at::Device& device) {
  at::NoGradGuard no_grad;
  const int64_t rows = r.ids.size(0);
  const PaddedSequences set = sequences_of(r);
  at::Tensor out = at::zeros_like(r.old_logp);
  for (int64_t c = 0; c < n_chunks; ++c) {
    for (const MicroBatch& mb : micro_batches(set, rows * c / n_chunks, rows * (c + 1) / n_chunks, max_tokens_per_mb,
                                              policy.comm(), device)) {
      at::Tensor logits = mb.forward(policy, weights);
      mb.put_back(token_logprobs(logits, mb.targets(), temperature).logprobs.cpu(), out);
    }
  }
  return out * r.loss_mask;
}

// The ranks that generate together (rollout.backend's t consecutive ranks), with the
// tensor-parallel communicator of the group (none at t = 1).
struct GenerationGroup {
  int first = 0, size = 1;
  std::unique_ptr<Communicator> comm;
};

// Rank `member` takes items member, member + world_size, ... of `n`; a generation group
// generates its members' items together, in member order.
std::vector<size_t> items_of(int member, int world_size, size_t n) {
  std::vector<size_t> items;
  for (size_t i = static_cast<size_t>(member); i < n; i += static_cast<size_t>(world_size)) items.push_back(i);
  return items;
}

// Greedy answers to every held-out prompt (each generation group its members' share,
// `chunk` prompts at a time), the share of answers with a positive reward over all
// ranks. Collective.
double evaluate(const PromptDataset& data, const Policy& policy, Communicator& comm, GenerationGroup& group,
                const RankInfo& me, SamplingParams greedy, const Tokenizer& tokenizer, Rewarder& reward,
                int64_t chunk) {
  RolloutModel slices(policy, group.comm.get(), policy.compute_dtype(), at::Device(me.device));
  std::vector<size_t> items;     // the group's
  std::vector<bool> mine;        // scored here: each answer is counted by the rank it belongs to
  for (int member = group.first; member < group.first + group.size; ++member)
    for (size_t i : items_of(member, me.world_size, data.size())) {
      items.push_back(i);
      mine.push_back(member == me.rank);
    }
  const EvalCounts counts = greedy_eval(slices, data, items, mine, greedy, tokenizer, reward, chunk);
  const double correct = counts.correct, count = counts.scored;
  at::Tensor totals = at::tensor({correct, count}, at::kDouble);
  comm.all_reduce(totals, ReduceOp::Sum);
  return totals[0].item<double>() / std::max(1.0, totals[1].item<double>());
}

}  // namespace

RlSummary run_rl(const Config& cfg, const RlInputs& inputs, const RankInfo& me, Communicator& comm, Policy& policy,
                 const GenerationLink* link) {
  const ActorConfig& actor = cfg.actor;
  const at::Device device(me.device);
  const at::ScalarType compute_dtype = policy.compute_dtype();
  const Tokenizer& tokenizer = *inputs.tokenizer;
  const SamplingParams& sampling = inputs.sampling;
  Rewarder* reward = inputs.reward.get();  // colocated only: the generation ranks score asynchronous RL
  const PromptDataset& train = *inputs.train;
  const PromptDataset* valid = inputs.valid.get();

  // ---- shapes of a step ----
  const TrainingSchedule& schedule = inputs.schedule;
  const int64_t n_samples = cfg.gconfig.n_samples, n_minibatches = actor.ppo_n_minibatches;
  const int64_t total_steps = schedule.total_steps;
  const int64_t max_tokens_per_mb = actor.mb_spec.max_tokens_per_mb;
  // An answer's score: its raw reward (+ DAPO's overlong penalty), transformed.
  auto score_of = [&](double raw, int64_t length) {
    if (actor.overlong_reward_penalty)
      raw += overlong_penalty(length, cfg.gconfig.max_new_tokens, actor.overlong_tokens, actor.overlong_penalty_factor);
    return transform_reward(raw, actor);
  };
  // DAPO's refill (batch_refill.h); the asynchronous loop trains on the groups that stay.
  const bool refill = actor.dynamic_sampling && !cfg.dynamic_bs && !link;
  log::info(cat("rl: ", train.size(), " prompts, ", schedule.steps_per_epoch, " steps per epoch, ", total_steps,
                " steps; ", cfg.train_dataset.batch_size, " prompts x ", n_samples, " answers per step, ",
                n_minibatches, " minibatches"));

  // ---- generation groups: t consecutive ranks generate together (rollout.backend) ----
  // (colocated only: with separate generation ranks the trainers do not generate)
  GenerationGroup group;
  if (!link) {
    group.size = static_cast<int>(allocation_for_world(cfg, me.world_size).tensor_parallel());
    group.first = me.rank / group.size * group.size;
    if (group.size > 1) group.comm = comm.split(me.rank / group.size, me.rank % group.size);
  }
  std::optional<GroupInbox> inbox;
  if (link) inbox.emplace(*link->mail, cfg.train_dataset.batch_size, me.rank, me.world_size, link->replicas);

  // ---- optimizer and the KL reference (the initial weights) ----
  ShardedAdamW optimizer(policy.trainable(), cfg.optimizer, comm);
  const bool use_reference = actor.kl_ctl > 0;
  if (use_reference) policy.keep_reference();

  // Recover: continue after the last recover checkpoint's step (recover.mode auto).
  // After the reference is kept, so it is of the initial weights either way.
  RunRecovery recovery(cfg, "rl", schedule.steps_per_epoch, comm, policy, optimizer);
  std::optional<RecoverPoint> resumed = recovery.resume();
  StatsLogger stats(cfg, me.rank, resumed ? resumed->steps_done : -1);
  PeriodicSaver saver(cfg, schedule.steps_per_epoch, comm);
  RlSummary summary;
  auto last_eval = Clock::now();
  auto evaluation_due = [&](int64_t steps_done) {  // evaluator.freq_*, the saver's rule
    const EvaluatorConfig& e = cfg.evaluator;
    return periodic_due(steps_done, schedule.steps_per_epoch, e.freq_steps, e.freq_epochs, e.freq_secs, last_eval, comm);
  };
  // Asynchronous RL: generation replica 0 evaluates and sends the scores to the first
  // trainer, which logs them as they come; `wait_for` >= 0 waits for that version's.
  auto take_remote_scores = [&](int64_t wait_for) {
    double wanted = -1;
    if (!link || !valid || me.rank != 0) return wanted;
    for (;;) {
      std::optional<Message> m = wait_for >= 0 ? link->mail->receive(kTagEval, kEvalSource, "the held-out score")
                                               : link->mail->poll(kTagEval, kEvalSource);
      if (!m) return wanted;
      const EvalScore score = decode_eval(m->bytes);
      log::info(cat("eval (weights of step ", score.version, ", on the generation ranks): greedy accuracy ",
                    format_fixed(100 * score.accuracy, 1), "% on ", valid->size(), " held-out prompts"));
      stats.log(score.version, {{"eval_accuracy", score.accuracy}});
      if (score.version == 0) summary.eval_before = score.accuracy;
      if (score.version == wait_for) return score.accuracy;
    }
  };
  auto run_eval = [&](const char* when) {
    if (!valid || link) return -1.0;
    auto start = Clock::now();
    last_eval = start;
    double accuracy = evaluate(*valid, policy, comm, group, me, sampling, tokenizer, *reward,
                               cfg.valid_dataset.batch_size);
    log::info(cat("eval (", when, "): greedy accuracy ", format_fixed(100 * accuracy, 1), "% on ", valid->size(),
                  " held-out prompts (", format_fixed(seconds_since(start), 1), " s)"));
    return accuracy;
  };
  int bad_in_a_row = 0;
  int64_t step = 0;
  if (resumed) {
    step = resumed->steps_done;
    summary.eval_before = resumed->figures["eval_before"];
    summary.first_reward = resumed->figures["first_reward"];
    bad_in_a_row = static_cast<int>(resumed->figures["bad_updates_in_a_row"]);
  } else if (!link) {
    summary.eval_before = run_eval("before training");
    if (valid) stats.log(0, {{"eval_accuracy", summary.eval_before}});
  }
  // The generation ranks start from the weights of the step the run is at.
  if (link) send_weights(policy, *link->mail, link->served, step, compute_dtype);

  const int64_t total_updates = total_steps * n_minibatches;
  EpochPlan plan;
  auto step_start = Clock::now();
  try {
  for (; step < total_steps; ++step) {
    // Every epoch has steps_per_epoch batches, so the step alone says where the run is.
    const int64_t epoch = step / schedule.steps_per_epoch;
    const size_t b = static_cast<size_t>(step % schedule.steps_per_epoch);
    if (b == 0 || plan.batches.empty()) plan = plan_epoch(schedule.epochs, epoch);
    const std::vector<size_t>& batch = plan.batches[b];
    comm.set_activity(cat("rl step ", step + 1));
    fault_points(cat("rl:step", step + 1), me.rank);
    // ---- rollout: this rank's prompts are every world_size-th of the batch; its
    // generation group generates its members' prompts together (memory checked for the
    // longest prompt of the data before the init, prepare_job). Asynchronous RL: they
    // come from the queue, generated and scored on the generation ranks. ----
    auto rollout_start = Clock::now();
    int64_t rows = 0;
    int64_t rollout_weight_bytes = 0, rollout_cache_bytes = 0;  // this rank's, for the stats
    int64_t reward_failures = 0, refill_rounds = 0;
    std::vector<float> refill_kept;  // DAPO's refill: 1 for each of this rank's groups in the batch
    Rollout r;
    if (link) {
      double waited = 0;
      r = pack_groups(inbox->take_step(step, waited), train, n_samples, tokenizer);
      rows = static_cast<int64_t>(r.rewards.size());
    } else {
      // Generates the groups of `round_batch` (prompt indices) with the generation group,
      // appending this rank's prompts and answers. Round 0 is the step's batch; later
      // rounds refill it (DAPO, below) and sample with other generator streams.
      std::vector<const Prompt*> prompts;  // this rank's
      std::vector<Generated> answers;      // theirs, n_samples per prompt
      RolloutModel slices(policy, group.comm.get(), compute_dtype, device);
      rollout_weight_bytes = slices.weight_bytes();
      auto generate_round = [&](const std::vector<size_t>& round_batch, int64_t round) {
        std::vector<std::vector<int64_t>> prompt_ids;  // the group's, n_samples rows per prompt
        std::vector<at::Generator> generators;
        size_t first_row = 0, mine = 0;  // this rank's answers among the group's
        for (int member = group.first; member < group.first + group.size; ++member) {
          if (member == me.rank) first_row = prompt_ids.size();
          for (size_t i : items_of(member, me.world_size, round_batch.size())) {
            const size_t index = round_batch[i];
            if (member == me.rank) {
              prompts.push_back(&train[index]);
              mine += n_samples;
            }
            for (int64_t s = 0; s < n_samples; ++s) {
              prompt_ids.push_back(train[index].ids);
              generators.push_back(answer_generator(cfg.seed, step, static_cast<int64_t>(index), s + round * n_samples));
            }
          }
        }
        std::vector<Generated> group_answers = generate(slices, prompt_ids, sampling, generators, &rollout_cache_bytes);
        answers.insert(answers.end(), group_answers.begin() + first_row, group_answers.begin() + first_row + mine);
      };
      generate_round(batch, 0);
      std::vector<double> rewards = score_answers(prompts, n_samples, answers, 0, tokenizer, *reward, reward_failures);
      if (refill) {
        // Rounds until batch_size groups of all ranks carry a signal; ranks take theirs
        // in round order, then rank order.
        const int64_t wanted = static_cast<int64_t>(batch.size());  // a partial last batch wants its own size
        int64_t accepted = 0;
        size_t round_first = 0;  // the round's first prompt among this rank's
        for (int64_t round = 0;; ++round) {
          if (round > 0) {
            const int64_t missing = (wanted - accepted + me.world_size - 1) / me.world_size * me.world_size;
            generate_round(refill_prompts(cfg.seed, step, round, missing, train.size()), round);
            const std::vector<double> more =
                score_answers(prompts, n_samples, answers, round_first, tokenizer, *reward, reward_failures);
            rewards.insert(rewards.end(), more.begin(), more.end());
          }
          std::vector<double> round_scores;
          for (size_t i = round_first * n_samples; i < answers.size(); ++i)
            round_scores.push_back(score_of(rewards[i], static_cast<int64_t>(answers[i].tokens.size())));
          const std::vector<bool> signal = group_signals(round_scores, n_samples);
          at::Tensor counts = at::zeros({me.world_size}, at::kLong);
          counts[me.rank] = static_cast<int64_t>(std::count(signal.begin(), signal.end(), true));
          comm.all_reduce(counts, ReduceOp::Sum);
          const std::vector<int64_t> all(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + me.world_size);
          int64_t take = groups_taken(all, me.rank, wanted - accepted);
          for (bool has_signal : signal) {
            const bool taken = has_signal && take > 0;
            take -= taken;
            refill_kept.push_back(taken ? 1.0f : 0.0f);
          }
          accepted = std::min(wanted, accepted + counts.sum().item<int64_t>());
          round_first = prompts.size();
          refill_rounds = round;
          if (accepted == wanted || round == kMaxRefillRounds) break;
        }
        if (accepted < wanted)
          log::warn(cat("step ", step + 1, ": ", accepted, " of ", wanted, " groups carry a signal after ",
                        kMaxRefillRounds, " refill rounds; the step trains on ",
                        accepted > 0 ? "those" : "all (none has a signal)"));
        if (accepted == 0) std::fill(refill_kept.begin(), refill_kept.end(), 1.0f);  // AReaL's rule
      }
      rows = static_cast<int64_t>(prompts.size()) * n_samples;
      r = pack(prompts, n_samples, answers, tokenizer);
      r.rewards = std::move(rewards);
      r.reward_failures = reward_failures;
    }
    const double rollout_seconds = seconds_since(rollout_start);

    // ---- scores: raw reward (+ DAPO's overlong penalty), transformed ----
    std::vector<double> scores;
    for (size_t i = 0; i < r.rewards.size(); ++i) scores.push_back(score_of(r.rewards[i], r.answer_lengths[i]));
    const at::Tensor score_tensor = at::tensor(scores, at::kFloat);
    // DAPO's dynamic sampling: groups without a signal leave the step (no loss, no
    // tokens, no part in the batch statistics); with the refill, so do the groups beyond
    // the batch.
    at::Tensor kept;
    if (actor.dynamic_sampling) {
      kept = refill ? at::tensor(refill_kept, at::kFloat).repeat_interleave(n_samples)
                    : groups_with_signal(score_tensor, n_samples, &comm);
      r.loss_mask *= kept.unsqueeze(1);
    }

    // ---- advantages ----
    auto train_start = Clock::now();
    // Decoupled PPO keeps generation's log-probs as the behaviour's and recomputes the
    // proximal ones; otherwise recompute_logprob replaces them.
    at::Tensor proximal_logp;
    if (actor.use_decoupled_loss || actor.recompute_logprob) {
      at::Tensor recomputed = score_rollout(policy, PolicyWeights::current, r, n_minibatches, max_tokens_per_mb,
                                            actor.temperature, device);
      (actor.use_decoupled_loss ? proximal_logp : r.old_logp) = recomputed;
    }
    const at::Tensor& ratio_base = actor.use_decoupled_loss ? proximal_logp : r.old_logp;
    const at::Tensor weights = actor.use_decoupled_loss
                                   ? behaviour_weights(proximal_logp, r.old_logp, actor.behav_imp_weight_cap)
                                   : at::Tensor();
    at::Tensor ref_logp, kl;
    if (use_reference) {
      ref_logp = score_rollout(policy, PolicyWeights::reference, r, n_minibatches, max_tokens_per_mb,
                               actor.temperature, device);
      kl = kl_estimate(r.old_logp, ref_logp, actor.kl_estimator) * r.loss_mask;
    }
    at::Tensor normalized = normalize_rewards(score_tensor, actor.reward_norm, &comm, kept);
    if (actor.mask_no_eos_with_zero) normalized = normalized * (1 - at::tensor(r.truncated_rows, at::kFloat));
    at::Tensor advantages = token_advantages(normalized, kl, r.loss_mask, actor.kl_ctl, actor.discount,
                                             actor.gae_lambda);
    advantages = normalize_advantages(advantages, r.loss_mask, actor.adv_norm, n_samples, &comm);

    // ---- PPO minibatch updates ----
    // Each minibatch's loss: weighted token losses over its units of all ranks (loss_agg_mode).
    const at::Tensor loss_weights = loss_token_weights(r.loss_mask, actor.loss_agg_mode, cfg.gconfig.max_new_tokens);
    at::Tensor mb_units = at::zeros({n_minibatches}, at::kDouble);
    for (int64_t m = 0; m < n_minibatches; ++m)
      mb_units[m] = loss_units(r.loss_mask.narrow(0, rows * m / n_minibatches,
                                                  rows * (m + 1) / n_minibatches - rows * m / n_minibatches),
                               actor.loss_agg_mode);
    comm.all_reduce(mb_units, ReduceOp::Sum);
    // Sums over this rank's answer tokens: loss, clipped, dual-clipped, entropy.
    double loss_sum = 0, clipped = 0, dual = 0, entropy = 0, grad_norm = 0, lr = 0;
    int64_t updates = 0;
    const PaddedSequences sequences = sequences_of(r);
    // GSPO: which answer each target position belongs to (packed rows hold several).
    const at::Tensor answer_ids = actor.importance_sampling_level == "sequence"
                                      ? at::arange(rows, at::kFloat).unsqueeze(1).expand_as(r.loss_mask).contiguous()
                                      : at::Tensor();
    for (int64_t m = 0; m < n_minibatches; ++m) {
      const int64_t begin = rows * m / n_minibatches, end = rows * (m + 1) / n_minibatches;
      const double global_units = std::max(1.0, mb_units[m].item<double>());
      // Micro-batches accumulate gradients. Each one's loss is summed over all ranks
      // before its backward: a non-finite one skips the whole minibatch's update.
      optimizer.zero_grad();
      double total = 0, mb_clipped = 0, mb_dual = 0, mb_entropy = 0;
      bool finite = true;
      for (const MicroBatch& mb : micro_batches(sequences, begin, end, max_tokens_per_mb, comm, device)) {
        at::Tensor logits = mb.forward(policy);
        const at::Tensor mask = mb.lay_out(r.loss_mask);
        TokenLogprobs tl = token_logprobs(logits, mb.targets(), actor.temperature);
        const at::Tensor base = mb.lay_out(ratio_base);
        const at::Tensor logp = answer_ids.defined()
                                    ? sequence_level_logp(tl.logprobs, base, mask, mb.lay_out(answer_ids))
                                    : tl.logprobs;
        PpoTokenLoss pl = ppo_token_loss(logp, base, mb.lay_out(advantages), actor.eps_clip, actor.eps_clip_higher,
                                         actor.c_clip);
        at::Tensor token_loss = weights.defined() ? pl.loss * mb.lay_out(weights) : pl.loss;
        at::Tensor local = (token_loss * mb.lay_out(loss_weights)).sum();
        at::Tensor part = local.detach().to(at::kDouble).cpu().reshape({1});
        comm.all_reduce(part, ReduceOp::Sum);
        if (!std::isfinite(part.item<double>())) {
          finite = false;
          break;
        }
        // The engine averages gradients over ranks; the factor undoes it, so the
        // gradient is that of the minibatch's loss over all ranks.
        (local * (static_cast<double>(me.world_size) / global_units)).backward();
        total += part.item<double>();
        mb_clipped += (pl.clipped.to(at::kFloat) * mask).sum().item<double>();
        mb_dual += (pl.dual_clipped.to(at::kFloat) * mask).sum().item<double>();
        mb_entropy += (tl.entropy * mask).sum().item<double>();
      }
      if (!finite) {
        log::warn(cat("step ", step + 1, " minibatch ", m + 1, ": the loss is not finite; the update was skipped"));
        if (++bad_in_a_row >= kMaxBadStepsInARow)
          throw std::runtime_error(cat(kMaxBadStepsInARow, " updates in a row had a non-finite loss; stopping "
                                       "(lower optimizer.lr, or check the data and the model)"));
        continue;
      }
      lr = learning_rate(cfg.optimizer, step * n_minibatches + m, total_updates);
      StepResult result = optimizer.step(lr);
      if (result.skipped) {
        log::warn(cat("step ", step + 1, " minibatch ", m + 1, ": the gradient norm is not finite; skipped"));
        if (++bad_in_a_row >= kMaxBadStepsInARow)
          throw std::runtime_error(cat(kMaxBadStepsInARow, " updates in a row had a non-finite gradient; stopping"));
        continue;
      }
      bad_in_a_row = 0;
      grad_norm += result.grad_norm;
      ++updates;
      loss_sum += total / global_units;
      clipped += mb_clipped;
      dual += mb_dual;
      entropy += mb_entropy;
    }
    const double train_seconds = seconds_since(train_start);
    // Asynchronous RL: the new weights go to the generation ranks at once.
    double sync_seconds = 0;
    if (link) {
      auto sync_start = Clock::now();
      send_weights(policy, *link->mail, link->served, step + 1, compute_dtype);
      sync_seconds = seconds_since(sync_start);
    }
    // Staleness: how many versions each answer's first token lags the weights it trains.
    double stale_sum = 0, stale_max = 0;
    for (int64_t v : r.head_versions) {
      stale_sum += static_cast<double>(step - v);
      stale_max = std::max(stale_max, static_cast<double>(step - v));
    }

    // ---- stats over all ranks ----
    double reward_sum = 0, reward_sq = 0, correct = 0;
    for (double x : r.rewards) {
      reward_sum += x;
      reward_sq += x * x;
      correct += x > 0;
    }
    const double kl_sum = kl.defined() ? kl.sum().item<double>() : 0.0;
    at::Tensor sums = at::tensor({reward_sum, reward_sq, correct, static_cast<double>(rows),
                                  static_cast<double>(r.answer_tokens), static_cast<double>(r.truncated), clipped, dual,
                                  entropy, kl_sum, static_cast<double>(r.reward_failures),
                                  static_cast<double>(r.ids.numel()),
                                  kept.defined() ? kept.sum().item<double>() : static_cast<double>(rows), stale_sum},
                                 at::kDouble);
    comm.all_reduce(sums, ReduceOp::Sum);
    // Peak memory is the host's high-water mark; a GPU allocator's peak is not recorded yet.
    at::Tensor maxima = at::tensor({static_cast<double>(r.longest_answer), static_cast<double>(peak_rss_bytes()),
                                    rollout_seconds, train_seconds, static_cast<double>(rollout_weight_bytes),
                                    static_cast<double>(rollout_cache_bytes), stale_max, sync_seconds},
                                   at::kDouble);
    comm.all_reduce(maxima, ReduceOp::Max);
    auto s = [&](int i) { return sums[i].item<double>(); };
    auto mx = [&](int i) { return maxima[i].item<double>(); };
    const double n = s(3), tokens = std::max(1.0, s(4));
    const double step_seconds = seconds_since(step_start);
    step_start = Clock::now();
    // Colocated: tokens per second of the rollout phase; asynchronous: of the whole step
    // (generation runs beside it, rollout_seconds is only the trainers' wait).
    const double gen_seconds = link ? step_seconds : mx(2);
    const double reward_mean = s(0) / n;
    const double reward_std = std::sqrt(std::max(0.0, s(1) / n - reward_mean * reward_mean));
    const Stats row = {{"epoch", static_cast<double>(epoch)},
                       {"prompts", static_cast<double>(batch.size())},
                       {"reward_mean", reward_mean},
                       {"reward_std", reward_std},
                       {"accuracy", s(2) / n},
                       {"response_length_mean", s(4) / n},
                       {"response_length_max", mx(0)},
                       {"truncated_share", s(5) / n},
                       {"loss", updates > 0 ? loss_sum / updates : NAN},
                       {"clip_fraction", s(6) / tokens},
                       {"dual_clip_fraction", s(7) / tokens},
                       {"entropy", s(8) / tokens},
                       {"kl", s(9) / tokens},
                       {"grad_norm", updates > 0 ? grad_norm / updates : NAN},
                       {"lr", lr},
                       {"rollout_seconds", mx(2)},
                       {"train_seconds", mx(3)},
                       {"gen_tokens_per_second", s(4) / std::max(1e-9, gen_seconds)},
                       {"train_tokens_per_second", s(11) / std::max(1e-9, mx(3))},
                       {"peak_memory_bytes", mx(1)},
                       {"rollout_weight_bytes", mx(4)},
                       {"rollout_cache_bytes", mx(5)},
                       {"reward_failures", s(10)}};
    Stats extra;
    if (actor.dynamic_sampling) {
      extra.push_back({"dynamic_sampling_kept_share", s(12) / n});
      extra.push_back({"dynamic_sampling_kept_groups", s(12) / static_cast<double>(n_samples)});
    }
    if (refill) extra.push_back({"refill_rounds", static_cast<double>(refill_rounds)});
    extra.push_back({"step_seconds", step_seconds});
    if (link) {  // rollout_seconds is the trainers' wait for the queue
      extra.push_back({"staleness_mean", s(13) / n});
      extra.push_back({"staleness_max", mx(6)});
      extra.push_back({"weight_sync_seconds", mx(7)});
      extra.push_back({"queue_groups_held", static_cast<double>(inbox->held())});
    }
    if (step == 0) summary.first_reward = reward_mean;
    summary.last_reward = reward_mean;
    char line[400];
    std::snprintf(line, sizeof line,
                  "step %lld/%lld  reward %.3f+-%.3f  acc %.3f  len %.1f/%.0f  trunc %.2f  loss %.4f  clip %.3f  "
                  "kl %.4f  ent %.3f  grad %.3f  lr %.2e  rollout %.1fs  train %.1fs  gen %.0f tok/s  mem %s",
                  static_cast<long long>(step + 1), static_cast<long long>(total_steps), reward_mean, reward_std,
                  s(2) / n, s(4) / n, mx(0), s(5) / n, updates > 0 ? loss_sum / updates : NAN, s(6) / tokens,
                  s(9) / tokens, s(8) / tokens, updates > 0 ? grad_norm / updates : NAN, lr, mx(2), mx(3),
                  s(4) / std::max(1e-9, gen_seconds), format_bytes(static_cast<int64_t>(mx(1))).c_str());
    log::info(line);
    if (s(10) > 0) log::warn(cat(s(10), " answers scored 0 because the reward function failed"));
    Stats logged = row;
    logged.insert(logged.end(), extra.begin(), extra.end());
    const bool last = step + 1 == total_steps;
    if (!link && valid && !last && evaluation_due(step + 1))
      logged.push_back({"eval_accuracy", run_eval(cat("step ", step + 1).c_str())});
    stats.log(step + 1, logged);
    saver.after_step(step + 1, last, policy);
    if (link) note_stop_signal(take_stop_notes(*link->mail));  // a generation rank's, relayed
    recovery.after_step(step + 1, last,
                        {{"eval_before", summary.eval_before},
                         {"first_reward", summary.first_reward},
                         {"bad_updates_in_a_row", static_cast<double>(bad_in_a_row)}});
    take_remote_scores(-1);
  }
  } catch (const StopRequested&) {
    if (link) {  // the generation ranks stop too, and what they sent is taken
      send_stop(*link->mail, link->served);
      inbox->drain();
    }
    throw;
  }
  summary.steps = step;
  if (link) {
    summary.eval_after = take_remote_scores(step);
    inbox->drain();
  } else {
    summary.eval_after = run_eval("after training");
    if (valid) stats.log(step, {{"eval_accuracy", summary.eval_after}});
  }
  summary.checkpoint = (std::filesystem::path(run_dir(cfg)) / "checkpoint").string();
  policy.save(summary.checkpoint);
  if (valid)
    log::info(cat("rl: held-out greedy accuracy ", format_fixed(100 * summary.eval_before, 1), "% -> ",
                  format_fixed(100 * summary.eval_after, 1), "%"));
  log::info(cat("rl: ", step, " steps, mean reward ", format_fixed(summary.first_reward, 3), " -> ",
                format_fixed(summary.last_reward, 3), "; saved ", summary.checkpoint, "; stats in ",
                (std::filesystem::path(run_dir(cfg)) / "stats.jsonl").string()));
  return summary;
}

}  // namespace areal
