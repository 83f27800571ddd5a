#include "areal/recover/recover_checkpoint.h"

#include <ATen/ATen.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "areal/io/atomic_dir.h"
#include "areal/io/safetensors.h"
#include "areal/util/strings.h"

namespace fs = std::filesystem;

namespace areal {
namespace {

using io::CheckpointError;

constexpr const char* kInfoFile = "recover_info.json";
constexpr const char* kFormat = "areal-train recover checkpoint 1";

std::string rank_file(int rank, int world_size) {
  char name[64];
  std::snprintf(name, sizeof name, "rank-%05d-of-%05d.safetensors", rank, world_size);
  return name;
}

const std::vector<UnitLayout>& trainable_units(const ShardedModel& model) {
  return model.has_adapters() ? model.adapter_units() : model.units();
}

// Elements [begin, end) of a unit's flat buffer that `rank` owns, padding excluded.
std::pair<int64_t, int64_t> owned_range(int64_t numel, int64_t shard_numel, int rank) {
  const int64_t begin = std::min(numel, rank * shard_numel);
  return {begin, std::min(numel, begin + shard_numel)};
}

}  // namespace

void write_recover_checkpoint(const std::string& dir, const RecoverPoint& point, const ShardedModel& model,
                              const ShardedAdamW* optimizer, Communicator& comm) {
  const fs::path final_dir = io::normalized_dir(dir);
  // Rank 0 names (and cleans) the temporary directory; every rank writes into it.
  at::Tensor pid = at::full({1}, static_cast<int64_t>(::getpid()), at::kLong);
  if (comm.rank() == 0) io::begin_dir_write(final_dir, ::getpid());
  comm.broadcast(pid, 0);
  const fs::path temp_dir = final_dir.string() + cat(".tmp-", pid.item<int64_t>());

  const std::vector<UnitLayout>& units = trainable_units(model);
  std::vector<at::Tensor> shards = const_cast<ShardedModel&>(model).trainable_shards();
  std::vector<std::pair<std::string, at::Tensor>> tensors;  // views of this rank's slices
  for (size_t i = 0; i < units.size(); ++i) {
    auto [begin, end] = owned_range(units[i].numel, units[i].shard_numel, comm.rank());
    if (end <= begin) continue;  // this rank holds only padding of the unit
    auto slice = [&](const at::Tensor& t) { return t.detach().narrow(0, 0, end - begin); };
    tensors.emplace_back(units[i].name + ".param", slice(shards[i]));
    if (optimizer) {
      tensors.emplace_back(units[i].name + ".exp_avg", slice(optimizer->exp_avg()[i]));
      tensors.emplace_back(units[i].name + ".exp_avg_sq", slice(optimizer->exp_avg_sq()[i]));
    }
  }
  std::vector<io::TensorSpec> specs;
  for (const auto& [name, t] : tensors) specs.push_back({name, io::DType::F32, {t.numel()}});
  io::SafetensorsWriter writer((temp_dir / rank_file(comm.rank(), comm.world_size())).string(), specs,
                               {{"format", "pt"}, {"steps_done", std::to_string(point.steps_done)}});
  for (const auto& [name, t] : tensors) writer.write(name, t.cpu().contiguous());
  writer.finish();
  comm.barrier();  // every file is in place

  if (comm.rank() == 0) {
    nlohmann::ordered_json info = {{"format", kFormat},
                                   {"job", point.job},
                                   {"steps_done", point.steps_done},
                                   {"optimizer_steps", optimizer ? optimizer->steps_taken() : 0},
                                   {"has_optimizer", optimizer != nullptr},
                                   {"world_size", comm.world_size()},
                                   {"figures", point.figures},
                                   {"tensors", nlohmann::ordered_json::array()}};
    for (const UnitLayout& unit : units)
      info["tensors"].push_back({{"name", unit.name}, {"numel", unit.numel}, {"shard_numel", unit.shard_numel}});
    std::ofstream out(temp_dir / kInfoFile);
    out << info.dump(1) << "\n";
    if (!out.flush()) throw CheckpointError(cat((temp_dir / kInfoFile).string(), ": write failed"));
    out.close();
    io::commit_dir_write(temp_dir, final_dir, "recover");
  }
  comm.barrier();  // nobody goes on before the new checkpoint is the one in place
}

std::optional<RecoverPoint> read_recover_point(const std::string& dir) {
  const fs::path path = fs::path(dir) / kInfoFile;
  if (!fs::exists(path)) return std::nullopt;
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  const nlohmann::json info = nlohmann::json::parse(text.str(), nullptr, false);
  auto bad = [&](const std::string& why) { return CheckpointError(cat(path.string(), ": ", why)); };
  if (!file || info.is_discarded() || !info.is_object()) throw bad("not valid JSON");
  if (info.value("format", "") != kFormat) throw bad(cat("not a recover checkpoint of this version (format '",
                                                         info.value("format", ""), "', expected '", kFormat, "')"));
  try {
    RecoverPoint point;
    point.job = info.at("job").get<std::string>();
    point.steps_done = info.at("steps_done").get<int64_t>();
    point.optimizer_steps = info.at("optimizer_steps").get<int64_t>();
    point.has_optimizer = info.at("has_optimizer").get<bool>();
    point.world_size = info.at("world_size").get<int>();
    point.figures = info.at("figures").get<std::map<std::string, double>>();
    for (const auto& t : info.at("tensors"))
      point.tensors.push_back({t.at("name").get<std::string>(), t.at("numel").get<int64_t>(),
                               t.at("shard_numel").get<int64_t>()});
    if (point.world_size < 1 || point.steps_done < 0) throw bad("world_size or steps_done out of range");
    return point;
  } catch (const nlohmann::json::exception& e) {
    throw bad(cat("missing or mistyped field: ", e.what()));
  }
}

void load_recover_checkpoint(const std::string& dir, const RecoverPoint& point, ShardedModel& model,
                             ShardedAdamW* optimizer) {
  const fs::path info_path = fs::path(dir) / kInfoFile;
  const std::vector<RecoverPoint::Tensor>& saved = point.tensors;
  const std::vector<UnitLayout>& units = trainable_units(model);
  if (saved.size() != units.size())
    throw CheckpointError(cat(info_path.string(), ": holds ", saved.size(), " trainable tensors, the model has ",
                              units.size(), model.has_adapters() ? " (LoRA adapters)" : "",
                              ": written by a run with another model or LoRA setting"));
  if (optimizer && !point.has_optimizer)
    throw CheckpointError(cat(info_path.string(), ": has no optimizer state (written with recover.no_save_optim); "
                              "resume with recover.no_load_optim true"));

  std::map<int, std::unique_ptr<io::SafetensorsReader>> readers;  // by the saving rank, opened when needed
  auto reader = [&](int q) -> io::SafetensorsReader& {
    auto& r = readers[q];
    if (!r) r = std::make_unique<io::SafetensorsReader>((fs::path(dir) / rank_file(q, point.world_size)).string());
    return *r;
  };
  std::vector<at::Tensor> shards = model.trainable_shards();
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < units.size(); ++i) {
    const UnitLayout& unit = units[i];
    const std::string& name = saved[i].name;
    const int64_t numel = saved[i].numel, old_shard = saved[i].shard_numel;
    if (name != unit.name || numel != unit.numel)
      throw CheckpointError(cat(info_path.string(), ": trainable tensor ", i, " is '", name, "' with ", numel,
                                " elements; the model's is '", unit.name, "' with ", unit.numel));
    std::vector<std::pair<std::string, at::Tensor>> targets;
    targets.emplace_back(".param", shards[i]);
    if (optimizer) {
      targets.emplace_back(".exp_avg", optimizer->exp_avg()[i]);
      targets.emplace_back(".exp_avg_sq", optimizer->exp_avg_sq()[i]);
    }
    auto [begin, end] = owned_range(unit.numel, unit.shard_numel, model.rank());
    for (auto& [suffix, target] : targets) {
      // Straight into a CPU shard; through a host buffer for a device one.
      const bool direct = target.is_cpu() && target.is_contiguous() && target.scalar_type() == at::kFloat;
      at::Tensor host = direct ? target : at::empty({unit.shard_numel}, at::kFloat);
      host.narrow(0, end - begin, unit.shard_numel - (end - begin)).zero_();  // the padding
      for (int q = 0; q < point.world_size; ++q) {  // the saved slices that overlap this rank's range
        auto [old_begin, old_end] = owned_range(numel, old_shard, q);
        const int64_t lo = std::max(begin, old_begin), hi = std::min(end, old_end);
        if (hi <= lo) continue;
        io::SafetensorsReader& r = reader(q);
        if (!r.find(name + suffix))
          throw CheckpointError(cat(r.path(), ": tensor '", name + suffix, "' is missing"));
        if (r.find(name + suffix)->numel() != old_end - old_begin)
          throw CheckpointError(cat(r.path(), ": tensor '", name + suffix, "' has ", r.find(name + suffix)->numel(),
                                    " elements, recover_info.json says ", old_end - old_begin));
        at::Tensor part = host.narrow(0, lo - begin, hi - lo);
        r.read_range_into(name + suffix, lo - old_begin, part);
      }
      if (!direct) target.copy_(host);
    }
  }
  if (optimizer) optimizer->set_steps_taken(point.optimizer_steps);
}

}  // namespace areal
