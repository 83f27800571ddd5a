#include "areal/rl/sft_trainer.h"

#include <ATen/ATen.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "areal/config/run_paths.h"
#include "areal/fsdp/engine.h"
#include "areal/fsdp/save.h"
#include "areal/optim/adamw.h"
#include "areal/optim/lr_schedule.h"
#include "areal/rl/byte_tokenizer.h"
#include "areal/rl/epoch_order.h"
#include "areal/rl/text_dataset.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/memory.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// This rank's rows of a batch (every world_size-th), right-padded: ids and mask [rows, T].
std::pair<at::Tensor, at::Tensor> rank_rows(const TextDataset& data, const std::vector<size_t>& batch, int rank,
                                            int world_size) {
  std::vector<const std::vector<int64_t>*> rows;
  for (size_t i = rank; i < batch.size(); i += world_size) rows.push_back(&data.sequence(batch[i]));
  size_t longest = 0;
  for (auto* row : rows) longest = std::max(longest, row->size());
  at::Tensor ids = at::full({static_cast<int64_t>(rows.size()), static_cast<int64_t>(longest)}, ByteTokenizer::kEos, at::kLong);
  at::Tensor mask = at::zeros_like(ids);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t n = static_cast<int64_t>(rows[r]->size());
    ids[r].narrow(0, 0, n).copy_(at::tensor(*rows[r], at::kLong));
    mask[r].narrow(0, 0, n).fill_(1);
  }
  return {ids, mask};
}

}  // namespace

SftSummary run_sft(const Config& cfg, const RankInfo& me, Communicator& comm, ShardedModel& model) {
  const int64_t batch_size = cfg.train_dataset.batch_size;
  if (batch_size % me.world_size != 0)
    throw ConfigError(cat("option 'train_dataset.batch_size' = ", batch_size, " must be a multiple of the world size (",
                          me.world_size, "): every rank trains on batch_size / world_size rows"));
  if (model.config().vocab_size < ByteTokenizer::kVocabSize)
    throw ConfigError(cat("--job sft uses the byte-level tokenizer (258 tokens); the model's vocab_size is ",
                          model.config().vocab_size));
  if (cfg.train_dataset.path.empty()) throw ConfigError("option 'train_dataset.path' is required for --job sft");

  TextDataset data(cfg.train_dataset.path, "text", cfg.train_dataset.max_length);
  if (data.skipped() > 0) log::warn(cat(data.skipped(), " sequences longer than train_dataset.max_length skipped"));
  const int64_t per_epoch = static_cast<int64_t>(cfg.train_dataset.drop_last ? data.size() / batch_size
                                                                              : (data.size() + batch_size - 1) / batch_size);
  if (per_epoch == 0)
    throw ConfigError(cat("the dataset has ", data.size(), " sequences, fewer than one batch of ", batch_size));
  int64_t total_steps = per_epoch * cfg.total_train_epochs;
  if (cfg.total_train_steps > 0) total_steps = std::min(total_steps, cfg.total_train_steps);
  log::info(cat("sft: ", data.size(), " sequences, ", per_epoch, " steps per epoch, ", total_steps, " steps"));

  const at::Device device(me.device);
  FsdpEngine engine(model, comm, dtype_from_name(cfg.actor.dtype), dtype_from_name(cfg.actor.grad_reduce_dtype));
  ShardedAdamW optimizer(model.trainable_shards(), cfg.optimizer, comm);
  // Host memory of the training phase alone: its growth over the RSS at its start.
  const int64_t rss_at_start = current_rss_bytes();
  reset_peak_rss();

  std::ofstream stats;
  if (me.rank == 0) {
    std::filesystem::create_directories(run_dir(cfg));
    // A fresh run starts a fresh file (resuming, which would append, is not implemented yet).
    stats.open(std::filesystem::path(run_dir(cfg)) / "stats.jsonl", std::ios::trunc);
  }
  SftSummary summary;
  int64_t step = 0;
  for (int64_t epoch = 0; step < total_steps; ++epoch) {
    std::vector<size_t> order = epoch_order(data.size(), cfg.seed, epoch, cfg.train_dataset.shuffle);
    for (int64_t b = 0; b < per_epoch && step < total_steps; ++b, ++step) {
      auto start = std::chrono::steady_clock::now();
      std::vector<size_t> batch(order.begin() + b * batch_size,
                                order.begin() + std::min<int64_t>((b + 1) * batch_size, order.size()));
      if (static_cast<int>(batch.size()) < me.world_size) break;  // a last batch too small to share
      auto [ids, mask] = rank_rows(data, batch, me.rank, me.world_size);
      ids = ids.to(device);
      mask = mask.to(device);

      // Token-level mean over the global batch: every rank divides by the global count,
      // and the engine's average over ranks is undone by the factor world_size.
      at::Tensor logits = engine.forward(ids, mask);
      const int64_t length = ids.size(1);
      at::Tensor targets = ids.narrow(1, 1, length - 1);
      at::Tensor weights = mask.narrow(1, 1, length - 1).to(at::kFloat);
      at::Tensor token_loss = at::cross_entropy_loss(logits.narrow(1, 0, length - 1).reshape({-1, logits.size(-1)}).to(at::kFloat),
                                                     targets.reshape({-1}), {}, at::Reduction::None);
      at::Tensor local_sum = (token_loss * weights.reshape({-1})).sum();
      at::Tensor counts = at::stack({weights.sum(), local_sum.detach()}).to(at::kDouble).cpu();
      comm.all_reduce(counts, ReduceOp::Sum);
      const double tokens = counts[0].item<double>(), loss = counts[1].item<double>() / tokens;
      optimizer.zero_grad();
      (local_sum * (static_cast<double>(me.world_size) / tokens)).backward();
      const double lr = learning_rate(cfg.optimizer, step, total_steps);
      StepResult result = optimizer.step(lr);

      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (step == 0) summary.first_loss = loss;
      summary.last_loss = loss;
      if (result.skipped) log::warn(cat("step ", step + 1, ": gradient norm is not finite; the update was skipped"));
      char line[256];
      std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f  grad_norm %.3f  lr %.3g  tokens/s %.0f  peak_mem %s",
                    static_cast<long long>(step + 1), static_cast<long long>(total_steps), loss, result.grad_norm, lr,
                    tokens / seconds, format_bytes(peak_rss_bytes()).c_str());
      // Every step goes to stats.jsonl; the log shows about 50 lines of a long run.
      const int64_t every = std::max<int64_t>(1, total_steps / 50);
      if (step == 0 || (step + 1) % every == 0 || step + 1 == total_steps || result.skipped) log::info(line);
      if (me.rank == 0) {
        stats << nlohmann::json{{"step", step + 1}, {"epoch", epoch}, {"loss", loss}, {"grad_norm", result.grad_norm},
                                {"lr", lr}, {"tokens", tokens}, {"seconds", seconds}, {"skipped", result.skipped},
                                {"peak_rss_bytes", peak_rss_bytes()}}
                     .dump()
              << "\n";
        stats.flush();
      }
    }
  }
  summary.steps = step;
  {  // every rank's peak growth and peak, for benchmarks: <run dir>/train_memory.json
    at::Tensor memory = at::zeros({2, me.world_size}, at::kDouble);
    memory[0][me.rank] = static_cast<double>(peak_rss_bytes() - rss_at_start);
    memory[1][me.rank] = static_cast<double>(peak_rss_bytes());
    comm.all_reduce(memory, ReduceOp::Sum);
    if (me.rank == 0) {
      nlohmann::json figures = {{"peak_growth_bytes", std::vector<double>()}, {"peak_rss_bytes", std::vector<double>()}};
      for (int r = 0; r < me.world_size; ++r) {
        figures["peak_growth_bytes"].push_back(memory[0][r].item<double>());
        figures["peak_rss_bytes"].push_back(memory[1][r].item<double>());
      }
      write_run_file(cfg, "train_memory.json", figures.dump(1) + "\n");
    }
  }
  summary.checkpoint = (std::filesystem::path(run_dir(cfg)) / "checkpoint").string();
  save_trained_model(cfg, model, comm, summary.checkpoint);
  log::info(cat("sft: ", step, " steps, loss ", summary.first_loss, " -> ", summary.last_loss, "; saved ",
                summary.checkpoint));
  return summary;
}

}  // namespace areal
