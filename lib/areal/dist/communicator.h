// The one way ranks talk to each other. The sharded engine and the loader call
// these methods on flat buffers and never see MPI or NCCL.
//
// Each call is collective: every rank calls it, in the same order, with tensors of the
// same size and dtype. CPU tensors go through MPI, CUDA tensors through NCCL (on its
// own stream, ordered against the caller's current stream by events).
//
// Inputs are checked before any communication (contiguous, sizes, dtypes, devices);
// a bad input throws std::invalid_argument naming the call and the problem.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "areal/dist/collective_watchdog.h"
#include "areal/dist/bootstrap.h"

namespace areal {

enum class ReduceOp { Sum, Avg, Max };

// Implemented by the MPI backend and the NCCL backend; see comm_backend.h.
class CommBackend;
class CommThread;

// A collective started by Communicator::start_all_gather / start_reduce_scatter and
// still running beside the caller. wait() returns once its output may be read (CUDA:
// once the caller's current stream is ordered after it) and rethrows its error. Until
// then its tensors must stay untouched. An unwaited one waits when destroyed.
class PendingCollective {
 public:
  PendingCollective() = default;
  explicit PendingCollective(std::function<void()> finish) : finish_(std::move(finish)) {}
  PendingCollective(PendingCollective&& other) noexcept : finish_(std::move(other.finish_)) { other.finish_ = {}; }
  PendingCollective& operator=(PendingCollective&& other) noexcept;
  ~PendingCollective();

  void wait();
  bool pending() const { return static_cast<bool>(finish_); }

 private:
  std::function<void()> finish_;
};

class Communicator {
 public:
  // MPI always; NCCL too when `me.device` is a CUDA device and NCCL is compiled in.
  // With `collective_timeout_seconds` > 0 a watchdog ends the job when a collective
  // waits longer than that (collective_watchdog.h).
  explicit Communicator(const RankInfo& me, double collective_timeout_seconds = 0);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  bool has_nccl() const { return nccl_ != nullptr; }

  // `tensor` on every rank becomes root's `tensor`. Any size.
  void broadcast(at::Tensor& tensor, int root);
  // Root's `flat` (world_size * shard elements; ignored elsewhere, may be undefined)
  // is cut in equal chunks; rank r receives chunk r into `out_shard`.
  void scatter(const at::Tensor& flat, at::Tensor& out_shard, int root);
  // Rank r's `shard` lands at [r * shard, (r + 1) * shard) of every rank's `out_full`.
  void all_gather(const at::Tensor& shard, at::Tensor& out_full);
  // Element-wise reduction of every rank's `flat_in` (world_size * shard elements);
  // rank r keeps chunk r in `out_shard`.
  void reduce_scatter(const at::Tensor& flat_in, at::Tensor& out_shard, ReduceOp op);
  // Element-wise reduction of `tensor` over all ranks, in place. Any size.
  void all_reduce(at::Tensor& tensor, ReduceOp op);
  // Uneven exchange with every rank (MoE expert parallelism's tokens): `send` holds,
  // back to back in rank order, send_counts[p] elements for rank p; `recv` receives,
  // back to back in rank order, recv_counts[p] elements from rank p. Counts may be 0.
  // What p sends to this rank must be what this rank expects from p (exchange_counts).
  void all_to_all(const at::Tensor& send, const std::vector<int64_t>& send_counts, at::Tensor& recv,
                  const std::vector<int64_t>& recv_counts);
  // The counts every rank will send to this one: result[p] is rank p's send_counts[rank()].
  std::vector<int64_t> exchange_counts(const std::vector<int64_t>& send_counts);
  // Returns when every rank has called it (and this rank's pending NCCL work is done).
  void barrier();
  // The same without the watchdog: for a wait whose length is known to be legitimate
  // (trainers waiting for a generation rank that evaluates before it takes weights).
  // A rank that died still ends the job through the launcher.
  void barrier_unwatched();

  // all_gather and reduce_scatter started now and finished by the handle's wait(), so
  // that compute runs while they move data (the engine's prefetch, fsdp/overlap.h).
  // Collective like the blocking calls: every rank starts the same ones in the same
  // order. CPU tensors: a communication thread runs them in order on a duplicate of the
  // MPI communicator (MPI_THREAD_MULTIPLE; where MPI lacks it they run at once, and
  // async_overlaps() says so). CUDA tensors: queued on the NCCL stream, and the caller's
  // stream waits only in wait().
  PendingCollective start_all_gather(const at::Tensor& shard, at::Tensor& out_full);
  PendingCollective start_reduce_scatter(const at::Tensor& flat_in, at::Tensor& out_shard, ReduceOp op);
  // Whether started CPU collectives run beside the caller (MPI_THREAD_MULTIPLE).
  bool async_overlaps() const { return mpi_thread_multiple_; }

  // A communicator over the ranks that pass the same `color`, ranked by `key` (ties by
  // rank). Collective over this communicator. The group shares this one's watchdog.
  // Used for the tensor-parallel groups of generation (rollout/).
  std::unique_ptr<Communicator> split(int color, int key);

  // The MPI path splits messages above this many bytes (MPI counts are int).
  // Tests lower it to exercise the splitting on small buffers.
  void set_max_message_bytes(int64_t bytes);

  // What the job is doing now ("rl step 12"), for the watchdog's message.
  void set_activity(std::string activity);

 private:
  Communicator() = default;
  CommBackend& backend_for(const at::Tensor& tensor, const char* call);
  // Runs `collective` on the communication thread (made on first use), or at once.
  PendingCollective start_on_thread(const char* name, int64_t bytes, std::function<void(CommBackend&)> collective);

  int rank_ = 0;
  int world_size_ = 1;
  bool mpi_thread_multiple_ = false;
  std::unique_ptr<CommBackend> mpi_;
  std::unique_ptr<CommBackend> nccl_;
  std::unique_ptr<CommThread> mpi_thread_;  // after mpi_: destroyed (joined) first
  std::shared_ptr<CollectiveWatchdog> watchdog_;
};

const char* reduce_op_name(ReduceOp op);

}  // namespace areal
