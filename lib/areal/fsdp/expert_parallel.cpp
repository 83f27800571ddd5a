#include "areal/fsdp/expert_parallel.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "areal/fsdp/row_exchange.h"
#include "areal/util/strings.h"

namespace areal {

namespace {

int64_t sum(const std::vector<int64_t>& counts) {
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  return total;
}

using Intervals = std::vector<std::pair<int64_t, int64_t>>;  // [begin, end) in the unit's flat, ascending

// The parts of `needed` inside [begin, end), as (offset from begin, elements).
std::vector<std::pair<int64_t, int64_t>> clip(const Intervals& needed, int64_t begin, int64_t end) {
  std::vector<std::pair<int64_t, int64_t>> pieces;
  for (const auto& [from, to] : needed) {
    const int64_t a = std::max(from, begin), b = std::min(to, end);
    if (a < b) pieces.emplace_back(a - begin, b - a);
  }
  return pieces;
}

int64_t elements(const std::vector<std::pair<int64_t, int64_t>>& pieces) {
  int64_t total = 0;
  for (const auto& piece : pieces) total += piece.second;
  return total;
}

}  // namespace

ExpertParallelism::ExpertParallelism(Communicator& comm, const ModelConfig& config, const std::vector<UnitLayout>& units,
                                     int degree)
    : comm_(comm), degree_(degree) {
  const int world = comm.world_size(), rank = comm.rank();
  if (degree < 1 || world % degree != 0 || config.num_experts % degree != 0)
    throw std::invalid_argument(cat("ExpertParallelism: groups of ", degree, " ranks over ", world, " ranks and ",
                                    config.num_experts, " experts (the group size must divide both)"));
  group_ = comm.split(rank / degree, rank % degree);
  const int64_t local = config.num_experts / degree;
  using P = ModelConfig::ExpertProjection;
  for (size_t u = 0; u < units.size(); ++u) {
    const UnitLayout& unit = units[u];
    if (!starts_with(unit.name, "layers.")) continue;
    const int64_t layer = std::stoll(unit.name.substr(std::string("layers.").size()));
    if (!config.layer_is_sparse(layer)) continue;
    std::map<std::string, int64_t> expert_of;  // an expert weight's name -> its expert
    for (int64_t x = 0; x < config.num_experts; ++x)
      for (P projection : {P::Gate, P::Up, P::Down})
        expert_of[cat("model.layers.", layer, ".", config.expert_weight(x, projection))] = x;
    // What rank p runs: every weight but the experts of the other ranks of its group.
    auto runs = [&](int p, const ParamSlot& slot) {
      auto it = expert_of.find(slot.name);
      return it == expert_of.end() || it->second / local == p % degree;
    };
    auto needed = [&](int p) {
      Intervals intervals;
      for (const ParamSlot& slot : unit.params) {
        if (!runs(p, slot)) continue;
        if (!intervals.empty() && intervals.back().second == slot.offset) intervals.back().second += slot.numel;
        else intervals.emplace_back(slot.offset, slot.offset + slot.numel);
      }
      return intervals;
    };
    Plan plan;
    plan.local.name = unit.name;
    for (const ParamSlot& slot : unit.params)
      if (runs(rank, slot)) {
        plan.local.params.push_back({slot.name, slot.shape, plan.local.numel, slot.numel});
        plan.local.numel += slot.numel;
      }
    plan.local.padded_numel = plan.local.numel;
    const int64_t shard = unit.shard_numel;
    plan.shard_numel = shard;
    const Intervals mine = needed(rank);
    for (int p = 0; p < world; ++p) {
      plan.send.push_back(clip(needed(p), rank * shard, (rank + 1) * shard));
      plan.send_counts.push_back(elements(plan.send.back()));
      plan.recv_counts.push_back(elements(clip(mine, p * shard, (p + 1) * shard)));
    }
    plans_[u] = std::move(plan);
  }
  Communicator* group = group_.get();
  layer_parallel_.ranks = degree;
  layer_parallel_.rank = rank % degree;
  layer_parallel_.exchange = [group](const at::Tensor& rows, const std::vector<int64_t>& send_rows,
                                     const std::vector<int64_t>& recv_rows) {
    return exchange_rows(*group, rows, send_rows, recv_rows);
  };
  layer_parallel_.exchange_counts = [group](const std::vector<int64_t>& counts, int64_t per_rank) {
    const std::vector<int64_t> each(static_cast<size_t>(group->world_size()), per_rank);
    at::Tensor received = at::empty({per_rank * group->world_size()}, at::kLong);
    group->all_to_all(at::tensor(counts, at::kLong), each, received, each);
    return std::vector<int64_t>(received.data_ptr<int64_t>(), received.data_ptr<int64_t>() + received.numel());
  };
}

ExpertParallelism::~ExpertParallelism() = default;

int64_t ExpertParallelism::pieces_numel(size_t unit) const { return sum(plans_.at(unit).send_counts); }

void ExpertParallelism::gather(size_t unit, const at::Tensor& shard, at::Tensor& out, const at::Tensor& scratch) {
  const Plan& plan = plans_.at(unit);
  at::Tensor send = scratch.narrow(0, 0, sum(plan.send_counts));
  int64_t at = 0;
  for (const Pieces& pieces : plan.send)
    for (const auto& [offset, count] : pieces) {
      send.narrow(0, at, count).copy_(shard.narrow(0, offset, count));
      at += count;
    }
  comm_.all_to_all(send, plan.send_counts, out, plan.recv_counts);
}

void ExpertParallelism::reduce(size_t unit, const at::Tensor& local_grad, const at::Tensor& scratch,
                               const at::Tensor& target) {
  const Plan& plan = plans_.at(unit);
  at::Tensor received = scratch.narrow(0, 0, sum(plan.send_counts));
  comm_.all_to_all(local_grad.contiguous(), plan.recv_counts, received, plan.send_counts);
  // Every rank's gradient of each piece of this shard, averaged, into the shard's gradient.
  at::Tensor& grad = target.mutable_grad();
  if (!grad.defined()) grad = at::zeros({plan.shard_numel}, target.options().dtype(at::kFloat));
  const double share = 1.0 / comm_.world_size();
  int64_t at = 0;
  for (const Pieces& pieces : plan.send)
    for (const auto& [offset, count] : pieces) {
      grad.narrow(0, offset, count).add_(received.narrow(0, at, count), share);
      at += count;
    }
}

}  // namespace areal
