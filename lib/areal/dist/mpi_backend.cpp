// The CPU transport: MPI on flat host buffers.
//
// MPI counts are `int`, so every call is split into messages of at most
// max_message_bytes (1 GiB by default). For all_gather and scatter a block of a
// chunk is described by a datatype whose extent is the whole shard, so each rank's
// piece lands in place without staging copies.
//
// Every call is MPI's non-blocking form plus wait_all below, which stops polling at
// full speed once a healthy transfer of that size would be done: a rank that waits for
// a slow or stopped rank sleeps between polls instead of keeping a core busy.
//
// bfloat16 and float16 are reduced in float32: each rank's values are widened, MPI
// sums in float32, and the result is rounded to 16 bits once at the end. Summing in
// 16 bits (a custom MPI op) would round after every addition and lose the small
// terms next to large ones; the price is a float32 staging copy of the reduced chunk.
#include <ATen/ATen.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "areal/dist/comm_backend.h"
#include "areal/dist/mpi_check.h"

namespace areal {
namespace {

// The MPI type that moves (and, for arithmetic types, reduces) one element.
MPI_Datatype mpi_type(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kByte: return MPI_UINT8_T;
    case at::kBFloat16:
    case at::kHalf: return MPI_UINT16_T;  // moved as bits; reduced in float32 (see above)
    default: throw std::invalid_argument("no MPI type for this dtype");
  }
}

bool reduces_in_float32(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

MPI_Op mpi_op(ReduceOp op) { return op == ReduceOp::Max ? MPI_MAX : MPI_SUM; }  // Avg: sum, then divide

// `count` elements of `base`, with an extent of `stride` elements.
class StridedBlock {
 public:
  StridedBlock(MPI_Datatype base, int64_t count, int64_t stride, int64_t element_size) {
    MPI_Datatype block;
    AREAL_MPI_CHECK(MPI_Type_contiguous(static_cast<int>(count), base, &block));
    AREAL_MPI_CHECK(MPI_Type_create_resized(block, 0, static_cast<MPI_Aint>(stride * element_size), &type_));
    AREAL_MPI_CHECK(MPI_Type_commit(&type_));
    MPI_Type_free(&block);
  }
  ~StridedBlock() { MPI_Type_free(&type_); }
  MPI_Datatype get() const { return type_; }

 private:
  MPI_Datatype type_;
};

// Waits until `requests` complete. MPI_Testall also drives MPI's progress, so polling
// runs at full speed while a healthy collective of `bytes` could still be moving data
// (0.1 s plus 10 ms per MB, i.e. 100 MB/s at the least); after that the rank is
// waiting for another rank, and naps between polls (50 us, growing to 1 ms), so a
// stopped rank does not keep the others' cores busy until the watchdog ends the job.
void wait_all(MPI_Request* requests, int count, int64_t bytes) {
  using Clock = std::chrono::steady_clock;
  const auto spin_until = Clock::now() + std::chrono::duration<double>(0.1 + static_cast<double>(bytes) / 1e8);
  auto nap = std::chrono::microseconds(50);
  for (;;) {
    int done = 0;
    AREAL_MPI_CHECK(MPI_Testall(count, requests, &done, MPI_STATUSES_IGNORE));
    if (done) return;
    if (Clock::now() < spin_until) continue;
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
}

char* bytes(const at::Tensor& t, int64_t element_offset) {
  return static_cast<char*>(t.data_ptr()) + element_offset * t.element_size();
}

class MpiBackend final : public CommBackend {
 public:
  // Takes ownership of `comm` (a duplicate or split of MPI_COMM_WORLD).
  explicit MpiBackend(MPI_Comm comm) : comm_(comm) {
    AREAL_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
    AREAL_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
    AREAL_MPI_CHECK(MPI_Comm_size(comm_, &world_size_));
  }
  ~MpiBackend() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm_);
  }

  void set_max_message_bytes(int64_t bytes) override { max_message_bytes_ = bytes; }
  int rank() const override { return rank_; }
  int size() const override { return world_size_; }

  std::unique_ptr<CommBackend> split(int color, int key) override {
    MPI_Comm group;
    AREAL_MPI_CHECK(MPI_Comm_split(comm_, color, key, &group));
    auto backend = std::make_unique<MpiBackend>(group);
    backend->max_message_bytes_ = max_message_bytes_;
    return backend;
  }

  void broadcast(at::Tensor& tensor, int root) override {
    for_each_chunk(tensor.numel(), tensor.element_size(), [&](int64_t offset, int64_t n) {
      MPI_Request request;
      AREAL_MPI_CHECK(MPI_Ibcast(bytes(tensor, offset), static_cast<int>(n), mpi_type(tensor.scalar_type()), root,
                                 comm_, &request));
      wait_all(&request, 1, n * tensor.element_size());
    });
  }

  void scatter(const at::Tensor& flat, at::Tensor& out_shard, int root) override {
    const int64_t shard = out_shard.numel(), size = out_shard.element_size();
    const MPI_Datatype base = mpi_type(out_shard.scalar_type());
    for_each_chunk(shard, size, [&](int64_t offset, int64_t n) {
      MPI_Request request;
      std::unique_ptr<StridedBlock> block;  // the root's send type, alive until the wait ends
      if (rank_ == root) {
        block = std::make_unique<StridedBlock>(base, n, shard, size);
        AREAL_MPI_CHECK(MPI_Iscatter(bytes(flat, offset), 1, block->get(), bytes(out_shard, offset),
                                     static_cast<int>(n), base, root, comm_, &request));
      } else {
        AREAL_MPI_CHECK(MPI_Iscatter(nullptr, 0, base, bytes(out_shard, offset), static_cast<int>(n), base, root,
                                     comm_, &request));
      }
      wait_all(&request, 1, n * size * world_size_);
    });
  }

  void all_gather(const at::Tensor& shard, at::Tensor& out_full) override {
    const int64_t count = shard.numel(), size = shard.element_size();
    const MPI_Datatype base = mpi_type(shard.scalar_type());
    for_each_chunk(count, size, [&](int64_t offset, int64_t n) {
      StridedBlock block(base, n, count, size);
      MPI_Request request;
      AREAL_MPI_CHECK(MPI_Iallgather(bytes(shard, offset), static_cast<int>(n), base, bytes(out_full, offset), 1,
                                     block.get(), comm_, &request));
      wait_all(&request, 1, n * size * world_size_);
    });
  }

  // A ring: in step s each rank passes its partial sum of one chunk to the next rank
  // and adds its own input to the partial sum it receives; after n-1 steps rank r
  // holds chunk r reduced over all ranks. Each rank sends (n-1)/n of the buffer, the
  // least possible. (OpenMPI 4.1's MPI_Reduce_scatter_block measured 5-10x slower
  // here on shared memory with every algorithm it offers: see docs/benchmarks.md.)
  void reduce_scatter(const at::Tensor& flat_in, at::Tensor& out_shard, ReduceOp op) override {
    const int n = world_size_;
    const int64_t shard = out_shard.numel();
    const at::ScalarType work_type = reduces_in_float32(flat_in.scalar_type()) ? at::kFloat : flat_in.scalar_type();
    auto input_chunk = [&](int index) { return flat_in.narrow(0, int64_t{index} * shard, shard).to(work_type); };
    auto combine = [&](at::Tensor& acc, const at::Tensor& mine) {
      if (op == ReduceOp::Max) at::maximum_out(acc, acc, mine);
      else acc.add_(mine);
    };
    const int next = (rank_ + 1) % n, prev = (rank_ + n - 1) % n;
    // Two chunk-sized buffers that take turns: received into, added to, sent on. Kept
    // between calls, since fresh pages cost more than the additions.
    if (workspace_.scalar_type() != work_type || workspace_.numel() < 2 * shard)
      workspace_ = at::empty({2 * shard}, flat_in.options().dtype(work_type));
    at::Tensor outgoing = workspace_.narrow(0, 0, shard), incoming = workspace_.narrow(0, shard, shard);
    outgoing.copy_(input_chunk((rank_ + n - 1) % n));
    at::Tensor result = n == 1 ? input_chunk(0).clone() : at::Tensor();
    for (int step = 0; step < n - 1; ++step) {
      sendrecv(outgoing, next, incoming, prev);
      combine(incoming, input_chunk((rank_ + 2 * n - 2 - step) % n));
      std::swap(outgoing, incoming);  // what arrived (plus ours) goes on next step
      result = outgoing;
    }
    if (op == ReduceOp::Avg) result.div_(n);
    out_shard.copy_(result);
  }

  void all_reduce(at::Tensor& tensor, ReduceOp op) override {
    at::Tensor flat = tensor.view({-1});
    const bool widen = reduces_in_float32(tensor.scalar_type());
    const at::ScalarType work_type = widen ? at::kFloat : tensor.scalar_type();
    for_each_chunk(flat.numel(), at::elementSize(work_type), [&](int64_t offset, int64_t n) {
      at::Tensor part = flat.narrow(0, offset, n);
      at::Tensor work = widen ? part.to(at::kFloat) : part;
      MPI_Request request;
      AREAL_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, work.data_ptr(), static_cast<int>(n), mpi_type(work_type),
                                     mpi_op(op), comm_, &request));
      wait_all(&request, 1, n * work.element_size());
      if (op == ReduceOp::Avg) work.div_(world_size_);
      if (widen) part.copy_(work);
    });
  }

  // Point-to-point with every other rank at once (each message split as usual); the
  // rank's own part is a local copy. MPI_Alltoallv would need int counts and offsets.
  void all_to_all(const at::Tensor& send, const std::vector<int64_t>& send_counts, at::Tensor& recv,
                  const std::vector<int64_t>& recv_counts) override {
    const MPI_Datatype type = mpi_type(send.scalar_type());
    std::vector<MPI_Request> requests;
    int64_t moved = 0, send_at = 0, recv_at = 0;
    std::vector<int64_t> send_offset(world_size_), recv_offset(world_size_);
    for (int p = 0; p < world_size_; ++p) {
      send_offset[p] = send_at, recv_offset[p] = recv_at;
      send_at += send_counts[p], recv_at += recv_counts[p];
    }
    for (int p = 0; p < world_size_; ++p) {
      if (p == rank_) continue;
      for_each_chunk(recv_counts[p], recv.element_size(), [&](int64_t offset, int64_t n) {
        requests.emplace_back();
        AREAL_MPI_CHECK(MPI_Irecv(bytes(recv, recv_offset[p] + offset), static_cast<int>(n), type, p, kAllToAllTag,
                                  comm_, &requests.back()));
      });
      for_each_chunk(send_counts[p], send.element_size(), [&](int64_t offset, int64_t n) {
        requests.emplace_back();
        AREAL_MPI_CHECK(MPI_Isend(bytes(send, send_offset[p] + offset), static_cast<int>(n), type, p, kAllToAllTag,
                                  comm_, &requests.back()));
      });
      moved += (send_counts[p] + recv_counts[p]) * send.element_size();
    }
    if (send_counts[rank_] > 0)  // Communicator::all_to_all checked that the two counts agree
      recv.view({-1}).narrow(0, recv_offset[rank_], recv_counts[rank_])
          .copy_(send.view({-1}).narrow(0, send_offset[rank_], send_counts[rank_]));
    if (!requests.empty()) wait_all(requests.data(), static_cast<int>(requests.size()), moved);
  }

  void barrier() override {
    MPI_Request request;
    AREAL_MPI_CHECK(MPI_Ibarrier(comm_, &request));
    wait_all(&request, 1, 0);
  }

 private:
  // Calls fn(offset, n) for consecutive pieces of `count` elements, each at most
  // max_message_bytes. Every rank computes the same pieces, so the calls match.
  template <typename Fn>
  void for_each_chunk(int64_t count, int64_t element_size, Fn fn) {
    const int64_t per_message = std::max<int64_t>(1, max_message_bytes_ / element_size);
    for (int64_t offset = 0; offset < count; offset += per_message) fn(offset, std::min(per_message, count - offset));
  }

  // Sends all of `send` to rank `to` while receiving as much into `recv` from `from`.
  void sendrecv(const at::Tensor& send, int to, at::Tensor& recv, int from) {
    const MPI_Datatype type = mpi_type(send.scalar_type());
    for_each_chunk(send.numel(), send.element_size(), [&](int64_t offset, int64_t n) {
      MPI_Request requests[2];
      AREAL_MPI_CHECK(MPI_Irecv(bytes(recv, offset), static_cast<int>(n), type, from, 0, comm_, &requests[0]));
      AREAL_MPI_CHECK(MPI_Isend(bytes(send, offset), static_cast<int>(n), type, to, 0, comm_, &requests[1]));
      wait_all(requests, 2, 2 * n * send.element_size());
    });
  }

  static constexpr int kAllToAllTag = 2;  // apart from the ring's sendrecv (tag 0)
  int rank_;
  int world_size_;
  MPI_Comm comm_;
  int64_t max_message_bytes_ = int64_t{1} << 30;
  at::Tensor workspace_;  // reduce_scatter's two ring buffers
};

}  // namespace

std::unique_ptr<CommBackend> make_mpi_backend() {
  MPI_Comm comm;
  AREAL_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm));
  return std::make_unique<MpiBackend>(comm);
}

}  // namespace areal
