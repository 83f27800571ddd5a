#include "areal/dist/communicator.h"

#include <ATen/ATen.h>
#include <mpi.h>

#include <cstdio>
#include <stdexcept>

#include "areal/dist/comm_backend.h"
#include "areal/dist/comm_thread.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

bool is_supported(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kBFloat16: case at::kHalf:
    case at::kLong: case at::kInt: case at::kByte:
      return true;
    default:
      return false;
  }
}

[[noreturn]] void refuse(const char* call, const std::string& why) {
  throw std::invalid_argument(cat("Communicator::", call, ": ", why));
}

void check_tensor(const char* call, const char* what, const at::Tensor& t) {
  if (!t.defined()) refuse(call, cat(what, " is undefined"));
  if (!t.is_contiguous()) refuse(call, cat(what, " is not contiguous (call .contiguous() first)"));
  if (!is_supported(t.scalar_type()))
    refuse(call, cat(what, " has dtype ", t.scalar_type(),
                     "; supported: float32, float64, bfloat16, float16, int64, int32, uint8"));
}

void check_pair(const char* call, const at::Tensor& whole, const char* whole_name, const at::Tensor& part,
                const char* part_name, int world_size) {
  if (whole.scalar_type() != part.scalar_type())
    refuse(call, cat(whole_name, " is ", whole.scalar_type(), " but ", part_name, " is ", part.scalar_type()));
  if (whole.device() != part.device())
    refuse(call, cat(whole_name, " is on ", whole.device(), " but ", part_name, " is on ", part.device()));
  if (whole.numel() != part.numel() * world_size)
    refuse(call, cat(whole_name, " has ", whole.numel(), " elements; it must have world_size (", world_size,
                     ") x ", part_name, " (", part.numel(), ") = ", part.numel() * world_size,
                     " (pad it to a multiple of the world size)"));
}

void check_op(const char* call, const at::Tensor& t, ReduceOp op) {
  if (op == ReduceOp::Avg && !at::isFloatingType(t.scalar_type()))
    refuse(call, cat("average of ", t.scalar_type(), " values is not defined; use Sum and divide"));
}

void check_root(const char* call, int root, int world_size) {
  if (root < 0 || root >= world_size) refuse(call, cat("root ", root, " is not a rank of a world of ", world_size));
}

}  // namespace

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

PendingCollective& PendingCollective::operator=(PendingCollective&& other) noexcept {
  if (this != &other) {
    if (finish_) {
      try {
        finish_();
      } catch (const std::exception& e) {
        std::fprintf(stderr, "a started collective failed: %s\n", e.what());
      }
    }
    finish_ = std::move(other.finish_);
    other.finish_ = {};
  }
  return *this;
}

PendingCollective::~PendingCollective() {
  if (!finish_) return;
  try {
    finish_();
  } catch (const std::exception& e) {  // a destructor must not throw; the error is not lost
    std::fprintf(stderr, "a started collective failed: %s\n", e.what());
  }
}

void PendingCollective::wait() {
  if (!finish_) return;
  auto finish = std::move(finish_);
  finish_ = {};
  finish();
}

Communicator::Communicator(const RankInfo& me, double collective_timeout_seconds)
    : rank_(me.rank), world_size_(me.world_size) {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  mpi_thread_multiple_ = level >= MPI_THREAD_MULTIPLE;
  if (collective_timeout_seconds > 0) watchdog_ = std::make_shared<CollectiveWatchdog>(collective_timeout_seconds);
  mpi_ = make_mpi_backend();
  if (starts_with(me.device, "cuda")) {
#ifdef AREAL_WITH_NCCL
    nccl_ = make_nccl_backend(rank_, world_size_, me.local_rank, watchdog_.get());
#else
    throw std::runtime_error("device is " + me.device + " but areal-train was built without NCCL");
#endif
  }
}

Communicator::~Communicator() = default;

CommBackend& Communicator::backend_for(const at::Tensor& tensor, const char* call) {
  if (!tensor.is_cuda()) return *mpi_;
  if (!nccl_) refuse(call, "got a CUDA tensor, but this rank has no NCCL communicator (device=cpu or no NCCL)");
  return *nccl_;
}

void Communicator::broadcast(at::Tensor& tensor, int root) {
  check_tensor("broadcast", "tensor", tensor);
  check_root("broadcast", root, world_size_);
  CollectiveWatchdog::Watch watch(watchdog_.get(), "broadcast", tensor.nbytes());
  backend_for(tensor, "broadcast").broadcast(tensor, root);
}

void Communicator::scatter(const at::Tensor& flat, at::Tensor& out_shard, int root) {
  check_tensor("scatter", "out_shard", out_shard);
  check_root("scatter", root, world_size_);
  if (rank_ == root) {
    check_tensor("scatter", "flat", flat);
    check_pair("scatter", flat, "flat", out_shard, "out_shard", world_size_);
  }
  CollectiveWatchdog::Watch watch(watchdog_.get(), "scatter", out_shard.nbytes());
  backend_for(out_shard, "scatter").scatter(flat, out_shard, root);
}

void Communicator::all_gather(const at::Tensor& shard, at::Tensor& out_full) {
  check_tensor("all_gather", "shard", shard);
  check_tensor("all_gather", "out_full", out_full);
  check_pair("all_gather", out_full, "out_full", shard, "shard", world_size_);
  CollectiveWatchdog::Watch watch(watchdog_.get(), "all_gather", out_full.nbytes());
  backend_for(shard, "all_gather").all_gather(shard, out_full);
}

void Communicator::reduce_scatter(const at::Tensor& flat_in, at::Tensor& out_shard, ReduceOp op) {
  check_tensor("reduce_scatter", "flat_in", flat_in);
  check_tensor("reduce_scatter", "out_shard", out_shard);
  check_pair("reduce_scatter", flat_in, "flat_in", out_shard, "out_shard", world_size_);
  check_op("reduce_scatter", flat_in, op);
  CollectiveWatchdog::Watch watch(watchdog_.get(), "reduce_scatter", flat_in.nbytes());
  backend_for(flat_in, "reduce_scatter").reduce_scatter(flat_in, out_shard, op);
}

void Communicator::all_reduce(at::Tensor& tensor, ReduceOp op) {
  check_tensor("all_reduce", "tensor", tensor);
  check_op("all_reduce", tensor, op);
  CollectiveWatchdog::Watch watch(watchdog_.get(), "all_reduce", tensor.nbytes());
  backend_for(tensor, "all_reduce").all_reduce(tensor, op);
}

void Communicator::all_to_all(const at::Tensor& send, const std::vector<int64_t>& send_counts, at::Tensor& recv,
                              const std::vector<int64_t>& recv_counts) {
  check_tensor("all_to_all", "send", send);
  check_tensor("all_to_all", "recv", recv);
  if (send.scalar_type() != recv.scalar_type())
    refuse("all_to_all", cat("send is ", send.scalar_type(), " but recv is ", recv.scalar_type()));
  if (send.device() != recv.device())
    refuse("all_to_all", cat("send is on ", send.device(), " but recv is on ", recv.device()));
  auto check_counts = [&](const std::vector<int64_t>& counts, const char* name, const at::Tensor& t, const char* what) {
    if (static_cast<int>(counts.size()) != world_size_)
      refuse("all_to_all", cat(name, " has ", counts.size(), " entries; it needs one per rank (", world_size_, ")"));
    int64_t total = 0;
    for (int64_t c : counts) {
      if (c < 0) refuse("all_to_all", cat(name, " holds a negative count (", c, ")"));
      total += c;
    }
    if (total != t.numel())
      refuse("all_to_all", cat(name, " adds up to ", total, " elements but ", what, " has ", t.numel()));
  };
  check_counts(send_counts, "send_counts", send, "send");
  check_counts(recv_counts, "recv_counts", recv, "recv");
  if (send_counts[rank_] != recv_counts[rank_])
    refuse("all_to_all", cat("this rank sends itself ", send_counts[rank_], " elements but expects ", recv_counts[rank_]));
  CollectiveWatchdog::Watch watch(watchdog_.get(), "all_to_all", send.nbytes() + recv.nbytes());
  backend_for(send, "all_to_all").all_to_all(send, send_counts, recv, recv_counts);
}

std::vector<int64_t> Communicator::exchange_counts(const std::vector<int64_t>& send_counts) {
  if (static_cast<int>(send_counts.size()) != world_size_)
    refuse("exchange_counts", cat("send_counts has ", send_counts.size(), " entries; it needs one per rank (",
                                  world_size_, ")"));
  at::Tensor mine = at::tensor(send_counts, at::kLong);
  at::Tensor theirs = at::empty({world_size_}, at::kLong);
  const std::vector<int64_t> ones(static_cast<size_t>(world_size_), 1);
  all_to_all(mine, ones, theirs, ones);  // on the CPU (MPI) whatever the tokens' device: the counts are few
  return std::vector<int64_t>(theirs.data_ptr<int64_t>(), theirs.data_ptr<int64_t>() + world_size_);
}

PendingCollective Communicator::start_all_gather(const at::Tensor& shard, at::Tensor& out_full) {
  check_tensor("start_all_gather", "shard", shard);
  check_tensor("start_all_gather", "out_full", out_full);
  check_pair("start_all_gather", out_full, "out_full", shard, "shard", world_size_);
  if (shard.is_cuda()) return PendingCollective(backend_for(shard, "start_all_gather").start_all_gather(shard, out_full));
  return start_on_thread("all_gather (started)", out_full.nbytes(),
                         [shard, out_full](CommBackend& b) mutable { b.all_gather(shard, out_full); });
}

PendingCollective Communicator::start_reduce_scatter(const at::Tensor& flat_in, at::Tensor& out_shard, ReduceOp op) {
  check_tensor("start_reduce_scatter", "flat_in", flat_in);
  check_tensor("start_reduce_scatter", "out_shard", out_shard);
  check_pair("start_reduce_scatter", flat_in, "flat_in", out_shard, "out_shard", world_size_);
  check_op("start_reduce_scatter", flat_in, op);
  if (flat_in.is_cuda())
    return PendingCollective(backend_for(flat_in, "start_reduce_scatter").start_reduce_scatter(flat_in, out_shard, op));
  return start_on_thread("reduce_scatter (started)", flat_in.nbytes(),
                         [flat_in, out_shard, op](CommBackend& b) mutable { b.reduce_scatter(flat_in, out_shard, op); });
}

PendingCollective Communicator::start_on_thread(const char* name, int64_t bytes,
                                                std::function<void(CommBackend&)> collective) {
  if (!mpi_thread_multiple_) {  // MPI allows calls from one thread only: run it now
    CollectiveWatchdog::Watch watch(watchdog_.get(), name, bytes);
    collective(*mpi_);
    return PendingCollective();
  }
  // The thread's own communicator: a duplicate made by every rank at the same point
  // (the first started collective), so the split matches.
  if (!mpi_thread_) mpi_thread_ = std::make_unique<CommThread>(mpi_->split(0, rank_), watchdog_.get());
  return PendingCollective(mpi_thread_->submit(name, bytes, std::move(collective)));
}

void Communicator::barrier() {
  CollectiveWatchdog::Watch watch(watchdog_.get(), "barrier", 0);
  if (nccl_) nccl_->barrier();
  mpi_->barrier();
}

void Communicator::barrier_unwatched() {
  if (nccl_) nccl_->barrier();
  mpi_->barrier();
}

std::unique_ptr<Communicator> Communicator::split(int color, int key) {
  CollectiveWatchdog::Watch watch(watchdog_.get(), "split", 0);
  std::unique_ptr<Communicator> group(new Communicator());
  group->watchdog_ = watchdog_;
  group->mpi_thread_multiple_ = mpi_thread_multiple_;
  group->mpi_ = mpi_->split(color, key);
  if (nccl_) group->nccl_ = nccl_->split(color, key);
  group->rank_ = group->mpi_->rank();
  group->world_size_ = group->mpi_->size();
  return group;
}

void Communicator::set_max_message_bytes(int64_t bytes) {
  if (bytes < 1) throw std::invalid_argument("Communicator::set_max_message_bytes: must be >= 1");
  mpi_->set_max_message_bytes(bytes);
}

void Communicator::set_activity(std::string activity) {
  if (watchdog_) watchdog_->set_activity(std::move(activity));
}

}  // namespace areal
