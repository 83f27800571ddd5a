#include "areal/rl/eval_job.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "areal/config/allocation.h"
#include "areal/config/emit.h"
#include "areal/config/run_paths.h"
#include "areal/rl/eval_metrics.h"
#include "areal/rl/evaluation.h"
#include "areal/rollout/rollout_model.h"
#include "areal/util/clock.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

using json = nlohmann::ordered_json;

// A model's text need not be valid UTF-8 (a byte-level model, a cut multi-byte
// character): such bytes are written as U+FFFD.
std::string dumped(const json& value, int indent = -1) {
  return value.dump(indent, ' ', false, json::error_handler_t::replace);
}

// A prompt's row of results.jsonl: its samples, their rewards and its own numbers.
json prompt_row(const Config& cfg, size_t index, const Prompt& prompt, const std::vector<ScoredAnswer>& answers) {
  const PromptVerdict verdict = judge_answers(cfg.reward_fn, answers);
  json samples = json::array();
  for (size_t i = 0; i < answers.size(); ++i) {
    const ScoredAnswer& a = answers[i];
    samples.push_back({{"text", a.text}, {"answer", verdict.keys[i]}, {"reward", a.reward}, {"tokens", a.tokens},
                       {"truncated", a.truncated}, {"tool_calls", a.tool_calls}});
  }
  const int64_t n = static_cast<int64_t>(answers.size());
  return {{"index", index},
          {"prompt", prompt.example.prompt},
          {"reference", prompt.example.answer},
          {"n", n},
          {"correct", verdict.correct},
          {"pass@1", pass_at_k(n, verdict.correct, 1)},
          {"majority_answer", verdict.vote.answer},
          {"majority_votes", verdict.vote.votes},
          {"maj_correct", verdict.vote.correct},
          {"samples", samples}};
}

// Every rank's lines, on every rank (one all_gather of equal-sized byte buffers).
std::vector<std::string> gather_text(Communicator& comm, const std::string& mine) {
  at::Tensor sizes = at::zeros({comm.world_size()}, at::kLong);
  sizes[comm.rank()] = static_cast<int64_t>(mine.size());
  comm.all_reduce(sizes, ReduceOp::Sum);
  const int64_t widest = std::max<int64_t>(1, sizes.max().item<int64_t>());
  at::Tensor send = at::zeros({widest}, at::kByte);
  std::copy(mine.begin(), mine.end(), send.data_ptr<uint8_t>());
  at::Tensor all = at::empty({widest * comm.world_size()}, at::kByte);
  comm.all_gather(send, all);
  std::vector<std::string> out;
  for (int r = 0; r < comm.world_size(); ++r) {
    const char* from = reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + r * widest;
    out.emplace_back(from, static_cast<size_t>(sizes[r].item<int64_t>()));
  }
  return out;
}

// The summary over the prompts' rows (in index order).
json summarize(const Config& cfg, const std::vector<json>& rows, double seconds) {
  const int64_t n = cfg.gconfig.n_samples;
  const double prompts = static_cast<double>(rows.size());
  json s;
  s["prompts"] = rows.size();
  s["n_samples"] = n;
  for (int64_t k : reported_ks(n)) {
    double sum = 0;
    for (const json& row : rows) sum += pass_at_k(n, row["correct"].get<int64_t>(), k);
    s[cat("pass@", k)] = sum / prompts;
  }
  double maj = 0, tokens = 0, truncated = 0, answers = 0;
  for (const json& row : rows) {
    maj += row["maj_correct"].get<bool>();
    for (const json& a : row["samples"]) {
      tokens += a["tokens"].get<double>();
      truncated += a["truncated"].get<bool>();
      answers += 1;
    }
  }
  s[cat("maj@", n)] = maj / prompts;
  s["mean_length"] = tokens / answers;
  s["truncated"] = truncated / answers;
  s["model_path"] = cfg.init_from_scratch ? "(init_from_scratch)" : cfg.model_path;
  s["dataset"] = cfg.valid_dataset.path;
  s["reward_fn"] = cfg.reward_fn;
  s["temperature"] = cfg.gconfig.greedy ? 0.0 : cfg.gconfig.temperature;
  s["seed"] = cfg.seed;
  s["seconds"] = seconds;
  return s;
}

std::string summary_markdown(const Config& cfg, const json& s) {
  std::ostringstream md;
  md << "# Evaluation: " << s["dataset"].get<std::string>() << "\n\n"
     << "Model: `" << s["model_path"].get<std::string>() << "`, " << s["prompts"] << " prompts x " << s["n_samples"]
     << " samples, reward `" << s["reward_fn"].get<std::string>() << "`, " << format_fixed(s["seconds"].get<double>(), 1)
     << " s.\n\n| metric | value |\n|---|---|\n";
  for (const auto& [key, value] : s.items())
    if (starts_with(key, "pass@") || starts_with(key, "maj@") || key == "truncated")
      md << "| " << key << " | " << format_fixed(100 * value.get<double>(), 1) << "% |\n";
  md << "| mean_length | " << format_fixed(s["mean_length"].get<double>(), 1) << " tokens |\n\n"
     << "The config that produced it:\n\n```yaml\n" << config_to_yaml(cfg) << "```\n";
  return md.str();
}

}  // namespace

void run_eval(const Config& cfg, const RlInputs& in, const RankInfo& me, Communicator& comm, Policy& policy) {
  const auto start = Clock::now();
  const PromptDataset& data = *in.valid;
  const int group_size = static_cast<int>(allocation_for_world(cfg, me.world_size).tensor_parallel());
  const int group_first = me.rank / group_size * group_size;
  std::unique_ptr<Communicator> group;
  if (group_size > 1) group = comm.split(me.rank / group_size, me.rank % group_size);
  std::optional<EpisodeRunner> episodes;
  if (in.episodic) episodes.emplace(in.env.get(), group.get(), *in.tokenizer, in.tmpl, in.sampling.stop_ids, in.episodes);
  RolloutModel slices(policy, group.get(), policy.compute_dtype(), at::Device(me.device),
                      allocation_for_world(cfg, me.world_size).rollout.expert > 1);

  std::vector<size_t> items;
  std::vector<bool> mine;
  group_items(group_first, group_size, me.rank, me.world_size, data.size(), items, mine);
  const int64_t n = cfg.gconfig.n_samples;
  log::info(cat("eval: ", data.size(), " prompts of ", cfg.valid_dataset.path, " x ", n, " samples (",
                me.world_size / group_size, " generation group(s) of ", group_size, " rank(s) each)"));
  // Rank 0's group speaks for all: the groups share the prompts evenly.
  auto progress = [&](size_t done) {
    const double elapsed = seconds_since(start), share = static_cast<double>(done) / static_cast<double>(items.size());
    log::info(cat("eval: ", format_fixed(100 * share, 1), "% of the prompts (", format_fixed(elapsed, 1), " s, ETA ",
                  format_fixed(elapsed / share - elapsed, 1), " s)"));
  };
  const std::vector<std::vector<ScoredAnswer>> results =
      sample_eval(slices, data, items, mine, in.sampling, n, cfg.seed, *in.tokenizer, *in.reward,
                  cfg.valid_dataset.batch_size, episodes ? &*episodes : nullptr, progress);

  std::string lines;
  size_t next = 0;
  for (size_t k = 0; k < items.size(); ++k)
    if (mine[k]) lines += dumped(prompt_row(cfg, items[k], *data.shared(items[k]), results[next++])) + "\n";
  const std::vector<std::string> all = gather_text(comm, lines);
  if (me.rank != 0) return;

  std::map<size_t, json> by_index;
  for (const std::string& text : all) {
    std::istringstream stream(text);
    for (std::string line; std::getline(stream, line);)
      if (!line.empty()) {
        json row = json::parse(line);
        const size_t index = row["index"].get<size_t>();
        by_index[index] = std::move(row);
      }
  }
  std::vector<json> rows;
  std::string jsonl;
  for (auto& [index, row] : by_index) {
    jsonl += dumped(row) + "\n";
    rows.push_back(std::move(row));
  }
  const json summary = summarize(cfg, rows, seconds_since(start));
  json with_config = summary;
  with_config["config"] = config_to_yaml(cfg);
  write_run_file(cfg, "eval/results.jsonl", jsonl);
  write_run_file(cfg, "eval/summary.json", dumped(with_config, 2) + "\n");
  const std::string md = summary_markdown(cfg, summary);
  const std::string md_path = write_run_file(cfg, "eval/summary.md", md);
  std::string line = cat("eval: ", rows.size(), " prompts x ", n, " samples in ", format_fixed(summary["seconds"].get<double>(), 1), " s:");
  for (const auto& [key, value] : summary.items())
    if (starts_with(key, "pass@") || starts_with(key, "maj@"))
      line += cat(" ", key, " ", format_fixed(100 * value.get<double>(), 1), "%");
  log::info(line);
  log::info(cat("eval: per-prompt results and the summary in ", md_path.substr(0, md_path.rfind('/') + 1)));
}

}  // namespace areal
