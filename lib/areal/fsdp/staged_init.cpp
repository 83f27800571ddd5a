#include "areal/fsdp/staged_init.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>

#include "areal/fsdp/lora.h"
#include "areal/io/checkpoint.h"
#include "areal/io/hf_model_dir.h"
#include "areal/model/builtin_model.h"
#include "areal/model/hf_weights.h"
#include "areal/util/clock.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/memory.h"
#include "areal/util/progress.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// Wall time and peak RSS growth of one stage, or of one stage's share of interleaved
// work (add() may be called many times; the peak is the largest seen).
struct StageMeter {
  StageStats stats;
  int64_t baseline = 0;
  int64_t highest = 0;  // the highest RSS seen in any stretch, absolute
  explicit StageMeter(std::string name) { stats.name = std::move(name); }
  // Starts a measured stretch; growth counts from `base` (default: RSS now).
  Clock::time_point begin(int64_t base = -1) {
    baseline = base >= 0 ? base : current_rss_bytes();
    reset_peak_rss();
    return Clock::now();
  }
  void end(Clock::time_point start) {
    stats.seconds += seconds_since(start);
    const int64_t peak = peak_rss_bytes();
    highest = std::max(highest, peak);
    stats.peak_growth_bytes = std::max(stats.peak_growth_bytes, peak - baseline);
  }
};

// An order-independent, exact fingerprint of float32 values: their bit patterns summed
// as 32-bit integers, wrapping (arithmetic mod 2^32 is exact in any order), so the
// fingerprints of a unit's shards add up to the unit's mod 2^32. One vectorized pass:
// an int32 sum runs at memory speed, where widening to int64 first cost ~17x more.
int64_t fingerprint(const at::Tensor& float32_values) {
  const int32_t sum = float32_values.contiguous().view(at::kInt).sum(at::kInt).item<int32_t>();
  return static_cast<int64_t>(static_cast<uint32_t>(sum));
}


// Every rank generates each whole unit from the seed and keeps its slice.
void init_from_seed(ShardedModel& model, int64_t seed, std::vector<int64_t>& expected) {
  for (size_t u = 0; u < model.units().size(); ++u) {
    const UnitLayout& unit = model.units()[u];
    at::Tensor flat = seeded_unit(unit, u, seed);
    model.shard(u).copy_(flat.narrow(0, unit.shard_begin(model.rank()), unit.shard_numel));
    expected[u] = fingerprint(flat);
  }
}

// Elements [begin, begin + out.numel()) of a unit's flat buffer, read straight from the
// checkpoint: the pieces of the parameters that overlap the range, zeros for padding.
void read_unit_range(const io::CheckpointReader& checkpoint, const UnitLayout& unit, int64_t begin, at::Tensor out,
                     Progress& progress) {
  const int64_t end = begin + out.numel();
  if (end > unit.numel) out.narrow(0, std::max<int64_t>(0, unit.numel - begin), end - std::max(begin, unit.numel)).zero_();
  for (const auto& slot : unit.params) {
    const int64_t from = std::max(begin, slot.offset), to = std::min(end, slot.offset + slot.numel);
    if (from >= to) continue;
    at::Tensor piece = out.narrow(0, from - begin, to - from);
    checkpoint.read_range_into(slot.name, from - slot.offset, piece);
    progress.advance(static_cast<int64_t>(io::dtype_size(checkpoint.entry(slot.name).dtype)) * (to - from));
  }
}

// Elements of each rank's shard sent per scatter: at most kScatterChunk elements in all
// (64 MiB of float32 on rank 0, whatever the unit's size), and at least four pieces
// per shard, so that every model, even a tiny test one, goes through the chunking.
constexpr int64_t kScatterChunk = int64_t{1} << 24;
int64_t scatter_chunk(const UnitLayout& unit, int world_size) {
  return std::max<int64_t>(1, std::min((unit.shard_numel + 3) / 4, kScatterChunk / world_size));
}

}  // namespace

at::Tensor seeded_unit(const UnitLayout& unit, size_t unit_index, int64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(static_cast<uint64_t>(seed) * 1000003 + unit_index);
  at::Tensor flat = at::zeros({unit.padded_numel}, at::kFloat);
  for (const auto& slot : unit.params) {  // parameters in order; padding stays zero
    at::Tensor view = flat.narrow(0, slot.offset, slot.numel);
    if (ends_with(slot.name, "norm.weight")) view.fill_(1.0);
    else if (ends_with(slot.name, ".bias")) view.zero_();
    else view.normal_(0.0, 0.02, gen);  // transformers' initializer_range
  }
  return flat;
}

ModelConfig init_model_config(const Config& cfg) {
  if (cfg.model_path.empty()) return ModelConfig::from_json(builtin_tiny_config_json(), "built-in tiny model");
  try {
    return ModelConfig::from_file(io::HfModelDir(cfg.model_path).config_json());
  } catch (const io::CheckpointError& e) {
    throw ConfigError(cat("option 'model_path': ", e.what()));  // a bad input, before anything starts: exit 2
  }
}

namespace {

// Runs `checks` on every rank of `comm`; a ConfigError that any of them raises is raised
// on all of them, with the first failing rank's message, so the group ends alike (exit
// 2) and none waits in a collective. Over `comm`, not the world: in asynchronous RL only
// the training ranks run the init.
void agree_on_config_error(Communicator& comm, const std::function<void()>& checks) {
  std::string problem;
  try {
    checks();
  } catch (const ConfigError& e) {
    problem = e.what();
  }
  const int n = comm.world_size();
  at::Tensor failing = at::tensor({static_cast<int64_t>(problem.empty() ? 0 : n - comm.rank())}, at::kLong);
  comm.all_reduce(failing, ReduceOp::Max);
  if (failing.item<int64_t>() == 0) return;
  const int first = n - static_cast<int>(failing.item<int64_t>());
  at::Tensor length = at::tensor({static_cast<int64_t>(problem.size())}, at::kLong);
  comm.broadcast(length, first);
  at::Tensor text = at::zeros({length.item<int64_t>()}, at::kLong);
  for (size_t i = 0; i < problem.size() && comm.rank() == first; ++i) text[static_cast<int64_t>(i)] = static_cast<uint8_t>(problem[i]);
  comm.broadcast(text, first);
  std::string message(static_cast<size_t>(text.numel()), ' ');
  auto chars = text.accessor<int64_t, 1>();
  for (int64_t i = 0; i < text.numel(); ++i) message[static_cast<size_t>(i)] = static_cast<char>(chars[i]);
  throw ConfigError(first == 0 ? message : cat("rank ", first, ": ", message));
}

// The checkpoint opened and checked against the skeleton (every tensor named before any
// is read) on the ranks that read it. A damaged checkpoint is refused alike on every
// rank with the first failing rank's message (exit 2), whichever path.
std::unique_ptr<io::CheckpointReader> open_checkpoint(const Config& cfg, Communicator& comm, const CausalLM& skeleton,
                                                      bool this_rank_reads) {
  std::unique_ptr<io::CheckpointReader> checkpoint;
  agree_on_config_error(comm, [&] {
    if (!this_rank_reads) return;
    try {
      checkpoint = std::make_unique<io::CheckpointReader>(cfg.model_path);
      check_hf_weights(skeleton, *checkpoint);
    } catch (const io::CheckpointError& e) {
      throw ConfigError(cat("option 'model_path': ", e.what()));
    }
  });
  return checkpoint;
}

// What every tensor of the checkpoint is and where its bytes lie (names, dtypes, shapes,
// files, offsets), hashed (FNV-1a): ranks that read their own slices must agree on it,
// or a shared filesystem shows them different files under one path.
uint64_t layout_digest(const io::CheckpointReader& checkpoint) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](const std::string& text) {
    for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  };
  for (const auto& name : checkpoint.names()) {
    const io::TensorEntry& e = checkpoint.entry(name);
    mix(cat(name, "|", std::filesystem::path(checkpoint.file_of(name)).filename().string(), "|",
            static_cast<int>(e.dtype), "|", shape_text(e.shape), "|", e.begin, "|", e.end, ";"));
  }
  return hash;
}

void check_same_checkpoint(const Config& cfg, Communicator& comm,
                           const io::CheckpointReader& checkpoint) {
  const uint64_t mine = layout_digest(checkpoint);
  at::Tensor rank0 = at::tensor({static_cast<int64_t>(mine)}, at::kLong);
  comm.broadcast(rank0, 0);
  agree_on_config_error(comm, [&] {
    if (static_cast<uint64_t>(rank0.item<int64_t>()) != mine)
      throw ConfigError(cat("option 'model_path': ", cfg.model_path, " is not the same checkpoint on this rank as on ",
                            "rank 0 (the tensors' names, dtypes, shapes or file offsets differ): a shared filesystem ",
                            "out of sync, or different files under one path on different nodes"));
  });
}

// Memory-efficient: rank 0 streams the checkpoint tensor by tensor; each unit's shards
// are scattered piece by piece. Returns the fingerprints of the units read (rank 0).
void stream_from_rank0(const Config& cfg, const RankInfo& me, Communicator& comm, const CausalLM& skeleton,
                       ShardedModel& model, StageMeter& load_stage, StageMeter& send_stage, int64_t load_base,
                       std::vector<int64_t>& expected) {
  Clock::time_point t = load_stage.begin(load_base);
  std::unique_ptr<io::CheckpointReader> checkpoint = open_checkpoint(cfg, comm, skeleton, me.rank == 0);
  load_stage.end(t);
  Progress progress("loading checkpoint", checkpoint ? static_cast<int64_t>(checkpoint->total_bytes()) : 0,
                    me.rank == 0);
  // Rank 0 never assembles a whole unit: piece c of every rank's shard is read from
  // the file into one send buffer (block r for rank r) and scattered, so rank 0 holds
  // its shards plus one buffer of at most kScatterChunk elements.
  at::Tensor buffer;
  if (me.rank == 0) buffer = at::empty({kScatterChunk}, at::kFloat);
  for (size_t u = 0; u < model.units().size(); ++u) {
    const UnitLayout& unit = model.units()[u];
    const int64_t chunk = scatter_chunk(unit, me.world_size);
    uint32_t unit_fingerprint = 0;
    for (int64_t first = 0; first < unit.shard_numel; first += chunk) {
      const int64_t length = std::min(chunk, unit.shard_numel - first);
      at::Tensor send;
      if (me.rank == 0) {
        t = load_stage.begin(load_base);
        send = buffer.narrow(0, 0, length * me.world_size);
        for (int r = 0; r < me.world_size; ++r)
          read_unit_range(*checkpoint, unit, unit.shard_begin(r) + first, send.narrow(0, r * length, length), progress);
        unit_fingerprint += static_cast<uint32_t>(fingerprint(send));  // mod 2^32, like the shards' sum
        send = send.to(model.shard(u).device());
        load_stage.end(t);
      }
      t = send_stage.begin(load_base);
      at::Tensor piece = model.shard(u).narrow(0, first, length);
      comm.scatter(send, piece, 0);  // each rank receives only its piece of its shard
      send_stage.end(t);
    }
    expected[u] = unit_fingerprint;
  }
  progress.finish();
}

// The bytes of the checkpoint that fall in this rank's shards (what it reads).
int64_t own_slice_bytes(const io::CheckpointReader& checkpoint, const ShardedModel& model) {
  int64_t bytes = 0;
  for (const UnitLayout& unit : model.units()) {
    const int64_t begin = unit.shard_begin(model.rank()), end = begin + unit.shard_numel;
    for (const auto& slot : unit.params) {
      const int64_t overlap = std::min(end, slot.offset + slot.numel) - std::max(begin, slot.offset);
      if (overlap > 0) bytes += overlap * static_cast<int64_t>(io::dtype_size(checkpoint.entry(slot.name).dtype));
    }
  }
  return bytes;
}

// Sliced reads: every rank reads only the byte ranges of its own shard of every unit,
// converting to float32 as it goes; no rank holds a whole tensor, unit or state dict,
// and nothing is sent. On the CPU the pieces land straight in the shard; on a device
// they pass through one staging buffer of at most kScatterChunk elements. Returns this
// rank's fingerprints of what it read (summed over the ranks by verify).
void read_own_slices(const Config& cfg, const RankInfo& me, Communicator& comm, const CausalLM& skeleton,
                     ShardedModel& model, StageMeter& load_stage, int64_t load_base, std::vector<int64_t>& expected) {
  Clock::time_point t = load_stage.begin(load_base);
  std::unique_ptr<io::CheckpointReader> checkpoint = open_checkpoint(cfg, comm, skeleton, true);
  check_same_checkpoint(cfg, comm, *checkpoint);
  Progress progress("reading this rank's slices of the checkpoint", own_slice_bytes(*checkpoint, model), me.rank == 0);
  const bool on_cpu = model.shard(0).is_cpu();
  at::Tensor staging;
  if (!on_cpu) staging = at::empty({kScatterChunk}, at::kFloat);
  for (size_t u = 0; u < model.units().size(); ++u) {
    const UnitLayout& unit = model.units()[u];
    uint32_t unit_fingerprint = 0;
    for (int64_t first = 0; first < unit.shard_numel; first += kScatterChunk) {
      const int64_t length = std::min(kScatterChunk, unit.shard_numel - first);
      at::Tensor piece = model.shard(u).narrow(0, first, length);
      at::Tensor read_into = on_cpu ? piece : staging.narrow(0, 0, length);
      read_unit_range(*checkpoint, unit, unit.shard_begin(me.rank) + first, read_into, progress);
      unit_fingerprint += static_cast<uint32_t>(fingerprint(read_into));
      if (!on_cpu) piece.copy_(read_into);
    }
    expected[u] = unit_fingerprint;
  }
  progress.finish();
  load_stage.end(t);
}

// Where the fingerprints of the units that were read are known.
enum class ReadBy { rank0, every_rank_whole, each_rank_its_slices };

// The shards of all ranks together are exactly the units that were read.
void verify_shards(const ShardedModel& model, const std::vector<int64_t>& expected, ReadBy read_by,
                   Communicator& comm) {
  at::Tensor want = at::tensor(expected, at::kLong);
  if (read_by == ReadBy::rank0) comm.broadcast(want, 0);  // only rank 0 saw the data
  if (read_by == ReadBy::each_rank_its_slices) comm.all_reduce(want, ReduceOp::Sum);
  std::vector<int64_t> local;
  for (size_t u = 0; u < model.units().size(); ++u) local.push_back(fingerprint(model.shard(u)));
  at::Tensor got = at::tensor(local, at::kLong);
  comm.all_reduce(got, ReduceOp::Sum);
  for (size_t u = 0; u < model.units().size(); ++u)
    if (static_cast<uint32_t>(got[u].item<int64_t>()) != static_cast<uint32_t>(want[u].item<int64_t>()))
      throw std::runtime_error(cat("verify: the shards of unit '", model.units()[u].name,
                                   "' do not add up to the unit that was loaded"));
}

// LoRA adapters: those read (actor.lora_adapter_path), else generated on every rank
// from the seed like a scratch unit (B = 0: the adapted model starts equal to the
// loaded one).
void add_lora_adapters(const Config& cfg, const RankInfo& me, const LoraSpec& lora,
                       std::vector<UnitLayout> adapter_units, const std::vector<at::Tensor>& adapter_start,
                       ShardedModel& model) {
  model.add_adapters(std::move(adapter_units), lora.scale);
  for (size_t layer = 0; layer < model.adapter_units().size(); ++layer) {
    const UnitLayout& unit = model.adapter_units()[layer];
    const at::Tensor flat = adapter_start.empty() ? seeded_adapter_unit(unit, layer, cfg.seed) : adapter_start[layer];
    model.adapter_shard(layer).copy_(flat.narrow(0, unit.shard_begin(me.rank), unit.shard_numel));
  }
  if (!adapter_start.empty())
    log::info(cat("LoRA adapters from ", cfg.actor.lora_adapter_path, " (r = ", cfg.actor.lora_rank,
                  ", lora_alpha = ", cfg.actor.lora_alpha, ")"));
}

}  // namespace

InitResult staged_init(const Config& cfg, const RankInfo& me, Communicator& comm) {
  InitResult result;
  const bool from_checkpoint = !cfg.init_from_scratch;
  const bool streaming = from_checkpoint && cfg.fsdp.memory_efficient_load;
  const int64_t rss_before = current_rss_bytes();
  const auto init_start = Clock::now();
  const ModelConfig model_config = init_model_config(cfg);
  const std::string experts = model_config.num_experts > 0 ? cat(", ", model_config.num_experts, " experts, top ",
                                                                 model_config.num_experts_per_tok)
                                                           : "";
  log::info(cat("staged init: ", !from_checkpoint ? cat("from seed ", cfg.seed)
                                 : cat(streaming ? "memory-efficient load of " : "sliced load of ", cfg.model_path),
                " (", model_config.model_type, ", ", model_config.num_parameters(), " parameters", experts, ") on ",
                me.world_size, " ranks"));

  // 1. cpu_skeleton: names and shapes on the meta device, no parameter storage.
  StageMeter skeleton_stage("cpu_skeleton");
  auto t = skeleton_stage.begin();
  auto skeleton = std::make_shared<CausalLM>(model_config, at::TensorOptions().device(at::kMeta));
  skeleton_stage.end(t);

  // 2. fsdp_shard: the unit layout, and this rank's float32 shards on its device.
  StageMeter shard_stage("fsdp_shard");
  t = shard_stage.begin();
  auto units = plan_units(*skeleton, me.world_size);
  const bool sliced = from_checkpoint && !streaming;  // reads every element of every shard: no zero-fill
  result.model = std::make_unique<ShardedModel>(skeleton, std::move(units), me.rank, me.world_size,
                                                at::Device(me.device), /*zero_fill=*/!sliced);
  ShardedModel& model = *result.model;
  // LoRA: the adapter layout, and a starting adapter (actor.lora_adapter_path) read and
  // checked now, so that a wrong one is refused before the checkpoint streams.
  LoraSpec lora;
  std::vector<UnitLayout> adapter_units;
  std::vector<at::Tensor> adapter_start;
  if (cfg.actor.use_lora) {
    lora = lora_spec(cfg.actor);
    adapter_units = plan_adapter_units(*skeleton, lora, me.world_size);
    if (!cfg.actor.lora_adapter_path.empty())
      adapter_start = read_peft_adapter(cfg.actor.lora_adapter_path, cfg.actor, adapter_units);
  }
  shard_stage.end(t);

  // 3. and 4. Load and distribute: rank0_load and broadcast interleaved unit by unit
  // when streaming; sliced_read alone when every rank reads its own slices.
  StageMeter load_stage(sliced ? "sliced_read" : "rank0_load");
  StageMeter send_stage("broadcast");
  std::vector<int64_t> expected(model.units().size(), 0);
  const int64_t load_base = current_rss_bytes();
  ReadBy read_by = ReadBy::each_rank_its_slices;
  if (!from_checkpoint) {
    t = load_stage.begin();
    init_from_seed(model, cfg.seed, expected);
    load_stage.end(t);
    read_by = ReadBy::every_rank_whole;
    result.source = cat("seed ", cfg.seed);
  } else if (streaming) {
    stream_from_rank0(cfg, me, comm, *skeleton, model, load_stage, send_stage, load_base, expected);
    read_by = ReadBy::rank0;
    result.source = cat("checkpoint ", cfg.model_path, " (memory-efficient: streamed by rank 0)");
  } else {
    read_own_slices(cfg, me, comm, *skeleton, model, load_stage, load_base, expected);
    result.source = cat("checkpoint ", cfg.model_path, " (sliced: every rank read its own slices)");
  }

  // 5. verify: the shards of all ranks together are exactly the units that were read.
  StageMeter verify_stage("verify");
  t = verify_stage.begin();
  verify_shards(model, expected, read_by, comm);
  verify_stage.end(t);

  if (cfg.actor.use_lora) add_lora_adapters(cfg, me, lora, std::move(adapter_units), adapter_start, model);

  std::vector<const StageMeter*> stages = {&skeleton_stage, &shard_stage, &load_stage};
  if (read_by != ReadBy::each_rank_its_slices) stages.push_back(&send_stage);  // sliced reads send nothing
  stages.push_back(&verify_stage);
  for (const StageMeter* m : stages) {
    result.stages.push_back(m->stats);
    result.peak_growth_bytes = std::max(result.peak_growth_bytes, m->highest - rss_before);
  }
  result.seconds = seconds_since(init_start);
  return result;
}

InitReport gather_init_report(const InitResult& result, Communicator& comm) {
  // Per rank: [seconds, peak growth] for each stage and the whole init, then shard bytes.
  std::vector<double> mine;
  for (const auto& s : result.stages) {
    mine.push_back(s.seconds);
    mine.push_back(static_cast<double>(s.peak_growth_bytes));
  }
  mine.push_back(result.seconds);
  mine.push_back(static_cast<double>(result.peak_growth_bytes));
  mine.push_back(static_cast<double>(result.model->shard_bytes()));
  at::Tensor local = at::tensor(mine, at::kDouble);
  at::Tensor all = at::empty({local.numel() * comm.world_size()}, at::kDouble);
  comm.all_gather(local, all);

  InitReport report;
  if (comm.rank() != 0) return report;
  report.source = result.source;
  for (const auto& s : result.stages) report.stage_names.push_back(s.name);
  for (const auto& unit : result.model->units())
    report.largest_unit_bytes = std::max<int64_t>(report.largest_unit_bytes, unit.padded_numel * 4);
  const size_t stages = result.stages.size();
  auto values = all.accessor<double, 1>();
  for (int r = 0; r < comm.world_size(); ++r) {
    const int64_t base = r * local.numel();
    std::vector<StageStats> row;
    for (size_t s = 0; s < stages; ++s)
      row.push_back({result.stages[s].name, values[base + 2 * s], static_cast<int64_t>(values[base + 2 * s + 1])});
    report.ranks.push_back(row);
    report.seconds.push_back(values[base + 2 * stages]);
    report.peak_growth_bytes.push_back(static_cast<int64_t>(values[base + 2 * stages + 1]));
    report.shard_bytes.push_back(static_cast<int64_t>(values[base + 2 * stages + 2]));
  }
  return report;
}

std::string format_init_table(const InitReport& report) {
  const size_t ranks = report.ranks.size();
  std::string table = cat("staged init of ", report.source, "\n");
  char cell[64];
  auto add = [&](const char* format, auto value) {
    std::snprintf(cell, sizeof cell, format, value);
    table += cell;
  };
  add("  %-13s", "stage");
  add(" %10s", "time");
  for (size_t r = 0; r < ranks; ++r) add("  %15s", cat("peak +mem r", r).c_str());
  table += "\n";
  for (size_t s = 0; s <= report.stage_names.size(); ++s) {  // the last row: the whole init
    const bool whole = s == report.stage_names.size();
    double slowest = 0;
    for (size_t r = 0; r < ranks; ++r) slowest = std::max(slowest, whole ? report.seconds[r] : report.ranks[r][s].seconds);
    add("  %-13s", whole ? "whole init" : report.stage_names[s].c_str());
    add(" %9.3fs", slowest);
    for (size_t r = 0; r < ranks; ++r)
      add("  %15s", format_bytes(whole ? report.peak_growth_bytes[r] : report.ranks[r][s].peak_growth_bytes).c_str());
    table += "\n";
  }
  add("  %-13s", "shard bytes");
  add(" %10s", "");
  for (size_t r = 0; r < ranks; ++r) add("  %15s", format_bytes(report.shard_bytes[r]).c_str());
  return table;
}

std::string init_report_json(const InitReport& report) {
  nlohmann::ordered_json j;
  j["source"] = report.source;
  j["world_size"] = report.ranks.size();
  j["largest_unit_bytes"] = report.largest_unit_bytes;
  j["ranks"] = nlohmann::ordered_json::array();
  for (size_t r = 0; r < report.ranks.size(); ++r) {
    nlohmann::ordered_json rank = {{"rank", r},
                                   {"seconds", report.seconds[r]},
                                   {"peak_growth_bytes", report.peak_growth_bytes[r]},
                                   {"shard_bytes", report.shard_bytes[r]}};
    for (const auto& s : report.ranks[r])
      rank["stages"][s.name] = {{"seconds", s.seconds}, {"peak_growth_bytes", s.peak_growth_bytes}};
    j["ranks"].push_back(rank);
  }
  return j.dump(2) + "\n";
}

}  // namespace areal
