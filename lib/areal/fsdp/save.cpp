#include "areal/fsdp/save.h"

#include <ATen/ATen.h>

#include <map>

#include "areal/io/checkpoint.h"

namespace areal {

void save_sharded_checkpoint(const ShardedModel& model, Communicator& comm, const std::string& dir,
                             at::ScalarType dtype, uint64_t max_shard_bytes) {
  const auto& units = model.units();
  if (comm.rank() != 0) {
    // Follow rank 0's gathers in the same order; rank 0 writes.
    for (size_t u = 0; u < units.size(); ++u) model.gather_unit(u, comm, dtype);
    comm.barrier();
    return;
  }
  std::vector<io::TensorSpec> specs;
  std::map<std::string, size_t> unit_of;
  for (size_t u = 0; u < units.size(); ++u)
    for (const auto& slot : units[u].params) {
      specs.push_back({slot.name, io::from_scalar_type(dtype), slot.shape});
      unit_of[slot.name] = u;
    }
  // The writer asks for tensors in spec order, i.e. unit by unit: gather a unit when
  // its first tensor is asked for, and drop the previous one.
  size_t gathered = units.size();
  std::map<std::string, at::Tensor> views;
  io::write_checkpoint(
      dir, model.config().json_text, specs,
      [&](const io::TensorSpec& spec) {
        const size_t u = unit_of.at(spec.name);
        if (u != gathered) {
          views.clear();
          for (auto& [name, view] : model.unit_views(u, model.gather_unit(u, comm, dtype))) views[name] = view;
          gathered = u;
        }
        return views.at(spec.name);
      },
      max_shard_bytes);
  comm.barrier();
}

}  // namespace areal
