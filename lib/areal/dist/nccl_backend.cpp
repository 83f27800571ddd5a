// The GPU transport: NCCL on flat device buffers (compiled when AREAL_WITH_NCCL).
//
// Rank 0 creates the NCCL unique id and broadcasts it over MPI; every rank then joins
// the NCCL communicator on its own device. Collectives run on a dedicated stream:
// an event makes that stream wait for the caller's current stream (so the inputs are
// ready), and another makes the caller's stream wait for the collective (so the
// outputs are ready before anything reads them). The tensors are recorded on the
// NCCL stream so the caching allocator does not reuse their memory too early.
// NCCL counts are size_t: no message splitting is needed here. Each collective's
// completion event also goes to the collective watchdog, which ends the job when the
// queued work does not complete in time (a stopped peer) after aborting the communicator.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <mpi.h>
#include <nccl.h>

#include <initializer_list>
#include <memory>

#include "areal/dist/comm_backend.h"
#include "areal/dist/mpi_check.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

// Like AREAL_MPI_CHECK (mpi_check.h): the call, file:line and NCCL's own words.
void check_nccl(ncclResult_t result, const char* call, ncclComm_t comm, const char* file, int line) {
  if (result == ncclSuccess) return;
  std::string detail = comm ? ncclGetLastError(comm) : "";
  throw std::runtime_error(cat(call, " failed at ", file, ":", line, ": ", ncclGetErrorString(result),
                               detail.empty() ? "" : ": ", detail));
}
#define AREAL_NCCL_CHECK_ON(call, comm) check_nccl((call), #call, (comm), __FILE_NAME__, __LINE__)
#define AREAL_NCCL_CHECK(call) AREAL_NCCL_CHECK_ON(call, comm_)

ncclDataType_t nccl_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    case at::kHalf: return ncclFloat16;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kByte: return ncclUint8;
    default: throw std::invalid_argument("no NCCL type for this dtype");
  }
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
  }
  return ncclSum;
}

class NcclBackend final : public CommBackend {
 public:
  NcclBackend(int rank, int world_size, int cuda_device, CollectiveWatchdog* watchdog)
      : rank_(rank),
        watchdog_(watchdog),
        device_(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(cuda_device))),
        stream_(c10::cuda::getStreamFromPool(/*isHighPriority=*/true, device_.index())) {
    c10::cuda::CUDAGuard guard(device_);
    ncclUniqueId id;
    if (rank == 0) AREAL_NCCL_CHECK_ON(ncclGetUniqueId(&id), nullptr);
    AREAL_MPI_CHECK(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    AREAL_NCCL_CHECK_ON(ncclCommInitRank(&comm_, world_size, id, rank), nullptr);
    register_abort_hook(this, [this] { ncclCommAbort(comm_); });
  }

  // Adopts `comm`, a split of another backend's communicator.
  NcclBackend(ncclComm_t comm, int rank, const NcclBackend& parent)
      : rank_(rank), watchdog_(parent.watchdog_), device_(parent.device_), stream_(parent.stream_), comm_(comm) {
    register_abort_hook(this, [this] { ncclCommAbort(comm_); });
  }

  ~NcclBackend() override {
    unregister_abort_hook(this);
    ncclCommDestroy(comm_);
  }

  void broadcast(at::Tensor& tensor, int root) override {
    run("broadcast", tensor.nbytes(), {tensor}, [&] {
      AREAL_NCCL_CHECK(ncclBroadcast(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                     nccl_type(tensor.scalar_type()), root, comm_, stream_));
    });
  }

  void scatter(const at::Tensor& flat, at::Tensor& out_shard, int root) override {
    // NCCL has no scatter: root sends each rank its chunk in one group of point-to-point calls.
    const size_t n = out_shard.numel();
    const ncclDataType_t type = nccl_type(out_shard.scalar_type());
    std::vector<at::Tensor> used = {out_shard};
    if (rank_ == root) used.push_back(flat);
    run("scatter", out_shard.nbytes(), used, [&] {
      AREAL_NCCL_CHECK(ncclGroupStart());
      if (rank_ == root) {
        for (int r = 0; r < world_size(); ++r)
          AREAL_NCCL_CHECK(ncclSend(static_cast<char*>(flat.data_ptr()) + r * n * flat.element_size(), n, type, r,
                                    comm_, stream_));
      }
      AREAL_NCCL_CHECK(ncclRecv(out_shard.data_ptr(), n, type, root, comm_, stream_));
      AREAL_NCCL_CHECK(ncclGroupEnd());
    });
  }

  // One group of point-to-point calls with every rank, itself included.
  void all_to_all(const at::Tensor& send, const std::vector<int64_t>& send_counts, at::Tensor& recv,
                  const std::vector<int64_t>& recv_counts) override {
    const ncclDataType_t type = nccl_type(send.scalar_type());
    run("all_to_all", send.nbytes() + recv.nbytes(), {send, recv}, [&] {
      AREAL_NCCL_CHECK(ncclGroupStart());
      int64_t send_at = 0, recv_at = 0;
      for (int p = 0; p < world_size(); ++p) {
        if (send_counts[p] > 0)
          AREAL_NCCL_CHECK(ncclSend(static_cast<const char*>(send.data_ptr()) + send_at * send.element_size(),
                                    send_counts[p], type, p, comm_, stream_));
        if (recv_counts[p] > 0)
          AREAL_NCCL_CHECK(ncclRecv(static_cast<char*>(recv.data_ptr()) + recv_at * recv.element_size(),
                                    recv_counts[p], type, p, comm_, stream_));
        send_at += send_counts[p], recv_at += recv_counts[p];
      }
      AREAL_NCCL_CHECK(ncclGroupEnd());
    });
  }

  void all_gather(const at::Tensor& shard, at::Tensor& out_full) override { start_all_gather(shard, out_full)(); }

  void reduce_scatter(const at::Tensor& flat_in, at::Tensor& out_shard, ReduceOp op) override {
    start_reduce_scatter(flat_in, out_shard, op)();
  }

  // Prefetch and gradient reduction (fsdp/overlap.h): queued now on stream_, which
  // runs beside the caller's compute stream; the caller's stream waits in finish().
  std::function<void()> start_all_gather(const at::Tensor& shard, at::Tensor& out_full) override {
    return launch("all_gather", out_full.nbytes(), {shard, out_full}, [&] {
      AREAL_NCCL_CHECK(ncclAllGather(shard.data_ptr(), out_full.data_ptr(), shard.numel(),
                                     nccl_type(shard.scalar_type()), comm_, stream_));
    });
  }

  std::function<void()> start_reduce_scatter(const at::Tensor& flat_in, at::Tensor& out_shard,
                                             ReduceOp op) override {
    return launch("reduce_scatter", flat_in.nbytes(), {flat_in, out_shard}, [&] {
      AREAL_NCCL_CHECK(ncclReduceScatter(flat_in.data_ptr(), out_shard.data_ptr(), out_shard.numel(),
                                         nccl_type(flat_in.scalar_type()), nccl_op(op), comm_, stream_));
    });
  }

  void all_reduce(at::Tensor& tensor, ReduceOp op) override {
    run("all_reduce", tensor.nbytes(), {tensor}, [&] {
      AREAL_NCCL_CHECK(ncclAllReduce(tensor.data_ptr(), tensor.data_ptr(), tensor.numel(),
                                     nccl_type(tensor.scalar_type()), nccl_op(op), comm_, stream_));
    });
  }

  void barrier() override { stream_.synchronize(); }
  int rank() const override { return rank_; }
  int size() const override { return world_size(); }

  std::unique_ptr<CommBackend> split(int color, int key) override {
    c10::cuda::CUDAGuard guard(device_);
    ncclComm_t group = nullptr;
    AREAL_NCCL_CHECK_ON(ncclCommSplit(comm_, color, key, &group, nullptr), nullptr);
    int group_rank = 0;
    AREAL_NCCL_CHECK_ON(ncclCommUserRank(group, &group_rank), nullptr);
    return std::make_unique<NcclBackend>(group, group_rank, *this);
  }

 private:
  int world_size() const {
    int n = 0;
    ncclCommCount(comm_, &n);
    return n;
  }

  // Orders `collective` (queued on stream_) after the caller's stream and before
  // whatever the caller queues next; the watchdog polls its completion.
  template <typename Fn>
  void run(const char* name, int64_t bytes, const std::vector<at::Tensor>& tensors, Fn collective) {
    launch(name, bytes, tensors, collective)();
  }

  // Queues `collective` on stream_ after the work the caller's stream has queued so far.
  // The returned function makes the then-current stream of the caller wait for it.
  template <typename Fn>
  std::function<void()> launch(const char* name, int64_t bytes, const std::vector<at::Tensor>& tensors,
                               Fn collective) {
    c10::cuda::CUDAGuard guard(device_);
    c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(device_.index());
    at::cuda::CUDAEvent inputs_ready;
    inputs_ready.record(caller);
    inputs_ready.block(stream_);
    collective();
    for (const auto& t : tensors) c10::cuda::CUDACachingAllocator::recordStream(t.storage().data_ptr(), stream_);
    auto outputs_ready = std::make_shared<at::cuda::CUDAEvent>();
    outputs_ready->record(stream_);
    if (watchdog_) watchdog_->watch_queued(name, bytes, [outputs_ready] { return outputs_ready->query(); });
    const c10::DeviceIndex device = device_.index();
    return [outputs_ready, device] {
      c10::cuda::CUDAGuard guard(device);
      outputs_ready->block(c10::cuda::getCurrentCUDAStream(device));
    };
  }

  int rank_;
  CollectiveWatchdog* watchdog_;
  c10::Device device_;
  c10::cuda::CUDAStream stream_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::unique_ptr<CommBackend> make_nccl_backend(int rank, int world_size, int cuda_device,
                                               CollectiveWatchdog* watchdog) {
  return std::make_unique<NcclBackend>(rank, world_size, cuda_device, watchdog);
}

}  // namespace areal
