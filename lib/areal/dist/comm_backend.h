// What a transport implements for Communicator. Inputs arrive checked (contiguous,
// matching sizes and dtypes, supported op): a backend only moves bytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <functional>
#include <vector>

#include "areal/dist/communicator.h"

namespace areal {

class CommBackend {
 public:
  virtual ~CommBackend() = default;
  virtual void broadcast(at::Tensor& tensor, int root) = 0;
  virtual void scatter(const at::Tensor& flat, at::Tensor& out_shard, int root) = 0;
  virtual void all_gather(const at::Tensor& shard, at::Tensor& out_full) = 0;
  virtual void reduce_scatter(const at::Tensor& flat_in, at::Tensor& out_shard, ReduceOp op) = 0;
  virtual void all_reduce(at::Tensor& tensor, ReduceOp op) = 0;
  virtual void all_to_all(const at::Tensor& send, const std::vector<int64_t>& send_counts, at::Tensor& recv,
                          const std::vector<int64_t>& recv_counts) = 0;
  // MPI: MPI_Barrier. NCCL: waits for this rank's queued work; Communicator::barrier
  // follows it with the MPI barrier, which makes it global.
  virtual void barrier() = 0;
  // The same two collectives queued without making the caller wait: the returned
  // function orders the caller after them (CUDA: the caller's stream waits for the
  // collective's event). NCCL queues its work on a stream anyway; the MPI backend runs
  // them at once (Communicator gives it a thread instead, comm_thread.h).
  virtual std::function<void()> start_all_gather(const at::Tensor& shard, at::Tensor& out_full) {
    all_gather(shard, out_full);
    return [] {};
  }
  virtual std::function<void()> start_reduce_scatter(const at::Tensor& flat_in, at::Tensor& out_shard, ReduceOp op) {
    reduce_scatter(flat_in, out_shard, op);
    return [] {};
  }
  virtual void set_max_message_bytes(int64_t) {}
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The ranks passing the same `color`, ordered by `key` (MPI_Comm_split / ncclCommSplit).
  virtual std::unique_ptr<CommBackend> split(int color, int key) = 0;
};

// Over a duplicate of MPI_COMM_WORLD.
std::unique_ptr<CommBackend> make_mpi_backend();
// Defined only when NCCL is compiled in (AREAL_WITH_NCCL). With a `watchdog`, the work
// each collective queues is watched until it completes (CollectiveWatchdog::watch_queued).
std::unique_ptr<CommBackend> make_nccl_backend(int rank, int world_size, int cuda_device,
                                               CollectiveWatchdog* watchdog);

}  // namespace areal
