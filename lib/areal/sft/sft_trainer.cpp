#include "areal/sft/sft_trainer.h"

#include <ATen/ATen.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "areal/config/run_paths.h"
#include "areal/optim/adamw.h"
#include "areal/optim/lr_schedule.h"
#include "areal/recover/run_recovery.h"
#include "areal/fsdp/micro_batches.h"
#include "areal/recover/periodic_saves.h"
#include "areal/data/text_dataset.h"
#include "areal/util/clock.h"
#include "areal/util/crash_point.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/memory.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// This rank's rows of a batch (every groups-th from its data-parallel group's; with
// tensor or context parallelism the ranks of a group share their rows, each running its
// slices of the layers or a chunk of the rows: Policy::data_comm's rank and size are the
// group and the groups), right-padded with `pad`, and the weight of each target
// [rows, T - 1]: 1 where the target is a token with a loss.
std::pair<PaddedSequences, at::Tensor> rank_rows(const TextDataset& data, const std::vector<size_t>& batch,
                                                 Policy& policy, int64_t pad) {
  const size_t group = static_cast<size_t>(policy.data_comm().rank());
  const size_t groups = static_cast<size_t>(policy.data_comm().world_size());
  std::vector<SftSequence> rows;
  for (size_t i = group; i < batch.size(); i += groups) rows.push_back(data.sequence(batch[i]));
  size_t longest = 2;
  for (const SftSequence& row : rows) longest = std::max(longest, row.ids.size());
  PaddedSequences set;
  set.ids = at::full({static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)}, pad, at::kLong);
  at::Tensor weights = at::zeros({set.ids.size(0), set.ids.size(1) - 1}, at::kFloat);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t n = static_cast<int64_t>(rows[r].ids.size());
    set.ids[r].narrow(0, 0, n).copy_(at::tensor(rows[r].ids, at::kLong));
    for (const auto& [begin, end] : rows[r].loss_spans) {  // position t predicts token t + 1
      const int64_t first = std::max<int64_t>(begin, 1) - 1, last = std::min(end, n) - 1;
      if (last > first) weights[r].narrow(0, first, last - first).fill_(1);
    }
    set.lengths.push_back(n);
  }
  return {set, weights};
}

// The summed cross-entropy of one micro-batch's targets, each weighted by `weights`
// (the set's [N, L - 1] loss weights). Collective, like MicroBatch::forward.
at::Tensor weighted_loss_sum(const MicroBatch& mb, Policy& policy, const at::Tensor& weights, double total_tokens = 0) {
  // In a train step, the micro-batch's share of the step's loss tokens (for a mixture of
  // experts' load-balancing loss: Policy::forward).
  const at::Tensor laid_out = mb.lay_out(weights);
  const double share = total_tokens > 0 ? laid_out.sum().item<double>() / total_tokens : 0;
  // The head on the positions with a loss only (a prompt's predict nothing trained).
  const at::Tensor mask = laid_out > 0;
  at::Tensor logits = mb.forward_at(policy, mask, PolicyWeights::current, share);  // [P, vocab]
  const at::Tensor targets = mb.targets().masked_select(mask);
  at::Tensor token_loss = policy.vocab_parallel()  // this rank's vocabulary columns
                              ? -policy.vocab_logprobs(logits, targets, 1.0, /*entropy=*/false).first
                              : at::cross_entropy_loss(logits.to(at::kFloat), targets, {}, at::Reduction::None);
  return (token_loss * laid_out.masked_select(mask)).sum();
}

// The loss of the current weights over all of `data`'s sequences (their loss tokens,
// all ranks), no update: batches of `batch_size` dealt to the ranks like a training
// batch, each rank's rows packed into micro-batches (a rank may have none).
double evaluation_loss(const TextDataset& data, int64_t batch_size, int64_t max_tokens_per_mb, int64_t pad,
                       const RankInfo& me, Communicator& comm, Policy& policy) {
  at::NoGradGuard no_grad;
  at::Tensor sums = at::zeros({2}, at::kDouble);  // loss, tokens
  for (size_t first = 0; first < data.size(); first += static_cast<size_t>(batch_size)) {
    std::vector<size_t> batch;
    for (size_t i = first; i < std::min(data.size(), first + static_cast<size_t>(batch_size)); ++i) batch.push_back(i);
    const ContextChunk context = policy.context_chunk();
    auto [rows, weights] = rank_rows(data, batch, policy, pad);
    int64_t tokens = 1;
    for (int64_t n : rows.lengths) tokens += n;
    const int64_t budget = max_tokens_per_mb > 0 ? max_tokens_per_mb : tokens;  // default: one packed row
    // A group's rows and losses counted once: the first of its chunks counts the rows, the
    // first of its tensor-parallel ranks the losses (each rank of a tensor group has them).
    const double counted = policy.tensor_rank() == 0 ? 1 : 0;
    for (const MicroBatch& mb : micro_batches(rows, 0, rows.ids.size(0), budget, comm, at::Device(me.device), context))
      sums[0] += weighted_loss_sum(mb, policy, weights).to(at::kDouble).cpu() * counted;
    if (context.rank == 0) sums[1] += weights.sum().to(at::kDouble) * counted;
  }
  comm.all_reduce(sums, ReduceOp::Sum);
  return sums[0].item<double>() / std::max(1.0, sums[1].item<double>());
}

// One optimizer step on the batch's sequences: the token-level mean loss over the
// global batch (every rank divides by the global count of target tokens; the engine's
// average over ranks is undone by the factor world_size). Micro-batches
// (actor.mb_spec) accumulate their gradients. Collective.
struct SftStep {
  double loss = 0, tokens = 0, lr = 0;
  StepResult result;
  NamedFigures router;  // a mixture of experts' (Policy::router_figures)
};
SftStep train_step(const Config& cfg, const SftInputs& in, const std::vector<size_t>& batch, int64_t step,
                   const RankInfo& me, Communicator& comm, Policy& policy, ShardedAdamW& optimizer) {
  const ContextChunk context = policy.context_chunk();
  auto [rows, weights] = rank_rows(*in.train, batch, policy, in.tokenizer->pad_id());
  // The batch's loss tokens and loss, a group's rows counted once (its ranks share them;
  // the ranks of a tensor-parallel group compute the same loss).
  const bool counts = context.rank == 0 && policy.tensor_rank() == 0;
  at::Tensor tokens_all = (counts ? weights.sum() : at::zeros({})).to(at::kDouble).reshape({1});
  comm.all_reduce(tokens_all, ReduceOp::Sum);
  SftStep out;
  out.tokens = tokens_all.item<double>();
  optimizer.zero_grad();
  at::Tensor loss_sum = at::zeros({1}, at::kDouble);
  for (const MicroBatch& mb : micro_batches(rows, 0, rows.ids.size(0), cfg.actor.mb_spec.max_tokens_per_mb, comm,
                                            at::Device(me.device), context)) {
    at::Tensor local_sum = weighted_loss_sum(mb, policy, weights, out.tokens);
    (local_sum * (static_cast<double>(me.world_size) / out.tokens)).backward();
    if (policy.tensor_rank() == 0) loss_sum += local_sum.detach().to(at::kDouble).cpu();
  }
  comm.all_reduce(loss_sum, ReduceOp::Sum);
  out.loss = loss_sum.item<double>() / out.tokens;
  out.router = policy.router_figures();
  out.lr = learning_rate(cfg.optimizer, step, in.schedule.total_steps);
  out.result = optimizer.step(out.lr);
  return out;
}

// The step's line on rank 0 (about 50 lines for a long run: the first, the last, every
// total/50-th and any skipped update) and its row of stats.jsonl.
void report_step(const SftStep& s, int64_t step, int64_t total_steps, int64_t epoch, size_t rows, double seconds,
                 int64_t prefetched, std::ofstream& stats) {
  if (s.result.skipped) log::warn(cat("step ", step + 1, ": gradient norm is not finite; the update was skipped"));
  char line[256];
  std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  tokens/s %.0f  peak_mem %s",
                static_cast<long long>(step + 1), static_cast<long long>(total_steps), s.loss, s.result.grad_norm,
                s.lr, s.tokens / seconds, format_bytes(peak_rss_bytes()).c_str());
  const int64_t every = std::max<int64_t>(1, total_steps / 50);
  const std::string text = s.router.empty() ? std::string(line) : cat(line, "  moe_aux ", format_fixed(s.router[0].second, 4));
  if (step == 0 || (step + 1) % every == 0 || step + 1 == total_steps || s.result.skipped) log::info(text);
  if (!stats.is_open()) return;
  nlohmann::json row = {{"step", step + 1}, {"epoch", epoch}, {"rows", rows}, {"loss", s.loss},
                        {"grad_norm", s.result.grad_norm}, {"lr", s.lr}, {"tokens", s.tokens},
                        {"seconds", seconds}, {"skipped", s.result.skipped}, {"peak_rss_bytes", peak_rss_bytes()},
                        {"prefetched_gathers", prefetched}};
  for (const auto& [name, value] : s.router) row[name] = value;
  stats << row.dump() << "\n";
  stats.flush();
}

// Every rank's peak growth over `rss_at_start` and its peak, for benchmarks:
// <run dir>/train_memory.json. Collective.
void write_train_memory(const Config& cfg, const RankInfo& me, Communicator& comm, int64_t rss_at_start) {
  at::Tensor memory = at::zeros({2, me.world_size}, at::kDouble);
  memory[0][me.rank] = static_cast<double>(peak_rss_bytes() - rss_at_start);
  memory[1][me.rank] = static_cast<double>(peak_rss_bytes());
  comm.all_reduce(memory, ReduceOp::Sum);
  if (me.rank != 0) return;
  nlohmann::json figures = {{"peak_growth_bytes", std::vector<double>()}, {"peak_rss_bytes", std::vector<double>()}};
  for (int r = 0; r < me.world_size; ++r) {
    figures["peak_growth_bytes"].push_back(memory[0][r].item<double>());
    figures["peak_rss_bytes"].push_back(memory[1][r].item<double>());
  }
  write_run_file(cfg, "train_memory.json", figures.dump(1) + "\n");
}

}  // namespace

SftSummary run_sft(const Config& cfg, const SftInputs& inputs, const RankInfo& me, Communicator& comm,
                   Policy& policy) {
  const TrainingSchedule& schedule = inputs.schedule;
  const int64_t total_steps = schedule.total_steps;
  log::info(cat("sft: ", inputs.train->size(), " sequences, ", schedule.steps_per_epoch, " steps per epoch, ",
                total_steps, " steps"));
  ShardedAdamW optimizer(policy.trainable(), cfg.optimizer, comm);
  // Host memory of the training phase alone: its growth over the RSS at its start.
  const int64_t rss_at_start = current_rss_bytes();
  reset_peak_rss();
  // Recover: continue after the last recover checkpoint's step (recover.mode auto).
  RunRecovery recovery(cfg, "sft", schedule.steps_per_epoch, comm, policy, optimizer);
  std::optional<RecoverPoint> resumed = recovery.resume();
  SftSummary summary;
  int64_t step = resumed ? resumed->steps_done : 0;
  if (resumed) summary.first_loss = resumed->figures["first_loss"];
  std::ofstream stats;
  if (me.rank == 0) stats = open_run_log(cfg, "stats.jsonl", resumed ? step : -1);
  PeriodicSaver saver(cfg, schedule.steps_per_epoch, comm);
  // Held-out loss on valid_dataset: before the first step, on evaluator.freq_*, after the last.
  const TextDataset* valid = inputs.valid.get();
  auto last_eval = Clock::now();
  auto run_eval = [&](int64_t steps_done, const std::string& when) {
    last_eval = Clock::now();
    const double loss = evaluation_loss(*valid, cfg.valid_dataset.batch_size, cfg.actor.mb_spec.max_tokens_per_mb,
                                        inputs.tokenizer->pad_id(), me, comm, policy);
    log::info(cat("eval (", when, "): loss ", format_fixed(loss, 4), " on ", valid->size(), " held-out sequences"));
    if (stats.is_open()) stats << nlohmann::json{{"step", steps_done}, {"eval_loss", loss}}.dump() << "\n" << std::flush;
    return loss;
  };
  if (valid && resumed) summary.eval_loss_before = resumed->figures["eval_loss_before"];
  if (valid && !resumed) summary.eval_loss_before = run_eval(0, "before training");
  EpochPlan plan;
  for (; step < total_steps; ++step) {
    const size_t b = static_cast<size_t>(step % schedule.steps_per_epoch);
    if (b == 0 || plan.batches.empty()) plan = plan_epoch(schedule.epochs, step / schedule.steps_per_epoch);
    const auto start = Clock::now();
    const int64_t prefetched_before = policy.prefetched_gathers();
    comm.set_activity(cat("sft step ", step + 1));
    fault_points(cat("sft:step", step + 1), me.rank);
    const SftStep s = train_step(cfg, inputs, plan.batches[b], step, me, comm, policy, optimizer);
    if (step == 0) summary.first_loss = s.loss;
    summary.last_loss = s.loss;
    report_step(s, step, total_steps, step / schedule.steps_per_epoch, plan.batches[b].size(),
                seconds_since(start),
                policy.prefetched_gathers() - prefetched_before, stats);
    const bool last = step + 1 == total_steps;
    const EvaluatorConfig& e = cfg.evaluator;
    if (valid && !last &&
        periodic_due(step + 1, schedule.steps_per_epoch, e.freq_steps, e.freq_epochs, e.freq_secs, last_eval, comm))
      run_eval(step + 1, cat("step ", step + 1));
    saver.after_step(step + 1, last, policy);
    std::map<std::string, double> figures = {{"first_loss", summary.first_loss}};
    if (valid) figures["eval_loss_before"] = summary.eval_loss_before;
    recovery.after_step(step + 1, last, figures);
  }
  summary.steps = step;
  if (valid) summary.eval_loss_after = run_eval(step, "after training");
  write_train_memory(cfg, me, comm, rss_at_start);
  summary.checkpoint = (std::filesystem::path(run_dir(cfg)) / "checkpoint").string();
  policy.save(summary.checkpoint);
  log::info(cat("sft: ", step, " steps, loss ", summary.first_loss, " -> ", summary.last_loss,
                valid ? cat("; held-out loss ", format_fixed(summary.eval_loss_before, 4), " -> ",
                            format_fixed(summary.eval_loss_after, 4))
                      : std::string(),
                "; saved ", summary.checkpoint));
  return summary;
}

}  // namespace areal
