#include "areal/fsdp/sharded_model.h"

#include <sys/mman.h>

#include <cstdint>

#include <ATen/ATen.h>

namespace areal {

namespace {

// Asks the kernel for transparent huge pages under a large host buffer before its pages
// are first touched: a 2 GB shard then faults in 1,000 times, not 500,000 (measured on
// the 0.5 B model, whole init: sliced 2.0 s -> 1.4 s at N = 1 and 1.1 -> 0.6-0.9 s at
// N = 2; rank-0 streaming 2.7 -> 2.1 s at N = 1). Where THP is off this does nothing.
void advise_huge_pages(const at::Tensor& buffer) {
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = reinterpret_cast<uintptr_t>(buffer.data_ptr());
  const uintptr_t first = (begin + kHuge - 1) & ~(kHuge - 1), last = (begin + buffer.nbytes()) & ~(kHuge - 1);
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
}

}  // namespace

ShardedModel::ShardedModel(std::shared_ptr<CausalLM> skeleton, std::vector<UnitLayout> units, int rank,
                           int world_size, at::Device device, bool zero_fill)
    : skeleton_(std::move(skeleton)), units_(std::move(units)), rank_(rank), world_size_(world_size) {
  // Zero-filled by default although every init path overwrites every element: touching
  // the pages here, on all ranks at once, is cheaper than faulting them in during the
  // scatter (measured: -np 2, 0.5 B model, 1.30 s vs 1.78 s for the whole init). A
  // sliced load faults them in while reading instead, touching them once, not twice.
  for (const auto& u : units_) {
    at::Tensor shard = at::empty({u.shard_numel}, at::TensorOptions(device).dtype(at::kFloat));
    if (shard.is_cpu()) advise_huge_pages(shard);
    if (zero_fill) shard.zero_();
    shards_.push_back(shard);
  }
}

int64_t ShardedModel::shard_bytes() const {
  int64_t bytes = 0;
  for (const auto& s : shards_) bytes += s.numel() * s.element_size();
  return bytes;
}

std::unique_ptr<ShardedModel> ShardedModel::frozen_copy() const {
  auto copy = std::make_unique<ShardedModel>(skeleton_, units_, rank_, world_size_, shards_.at(0).device());
  for (size_t u = 0; u < shards_.size(); ++u) copy->shards_[u].copy_(shards_[u].detach());
  return copy;
}

namespace {

at::Tensor gather(const UnitLayout& layout, const at::Tensor& shard_master, Communicator& comm, at::ScalarType dtype) {
  at::Tensor shard = shard_master.to(dtype);
  at::Tensor full = at::empty({layout.padded_numel}, shard.options());
  comm.all_gather(shard, full);
  return full;
}

std::vector<std::pair<std::string, at::Tensor>> views(const UnitLayout& layout, const at::Tensor& flat) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (const auto& slot : layout.params) out.emplace_back(slot.name, flat.narrow(0, slot.offset, slot.numel).view(slot.shape));
  return out;
}

}  // namespace

at::Tensor ShardedModel::gather_unit(size_t unit, Communicator& comm, at::ScalarType dtype) const {
  return gather(units_.at(unit), shards_.at(unit), comm, dtype);
}

void ShardedModel::add_adapters(std::vector<UnitLayout> adapter_units, double scale) {
  adapter_units_ = std::move(adapter_units);
  adapter_scale_ = scale;
  for (const auto& u : adapter_units_)
    adapter_shards_.push_back(at::zeros({u.shard_numel}, shards_.at(0).options()));
}

std::vector<at::Tensor> ShardedModel::trainable_shards() {
  return has_adapters() ? adapter_shards_ : shards_;
}

at::Tensor ShardedModel::gather_adapter(size_t layer, Communicator& comm, at::ScalarType dtype) const {
  return gather(adapter_units_.at(layer), adapter_shards_.at(layer), comm, dtype);
}

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::adapter_views(size_t layer, const at::Tensor& flat) const {
  return views(adapter_units_.at(layer), flat);
}

std::vector<std::pair<std::string, at::Tensor>> ShardedModel::unit_views(size_t unit, const at::Tensor& flat) const {
  return views(units_.at(unit), flat);
}

}  // namespace areal
