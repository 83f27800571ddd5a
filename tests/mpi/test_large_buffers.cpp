// Buffers past 2^31 bytes and elements, where an int count would overflow. Hidden
// ([.large]): CTest runs it once, under mpirun -np 2.
#include <ATen/ATen.h>
#include "catch_with_torch.h"

#include "mpi_fixture.h"

using namespace areal;
using areal::testing::g_comm;
using areal::testing::g_me;

namespace {

// Element i of a byte buffer tagged `seed` is (i + seed) mod 251: a prime period, so
// no power-of-two offset hides a misplaced block. Filled and checked piece by piece
// from one precomputed period block, so the temporaries stay small and cheap.
constexpr int64_t kPeriod = 251;
constexpr int64_t kPiece = kPeriod * 65536;  // ~16 MB
const at::Tensor& period_block() {
  static const at::Tensor block = at::arange(kPiece + kPeriod, at::kLong).remainder_(kPeriod).to(at::kByte);
  return block;
}

at::Tensor piece_pattern(int64_t first, int64_t n, int64_t seed) {
  return period_block().narrow(0, (first + seed) % kPeriod, n);
}

void fill(at::Tensor t, int64_t seed) {
  for (int64_t o = 0; o < t.numel(); o += kPiece) {
    int64_t n = std::min(kPiece, t.numel() - o);
    t.narrow(0, o, n).copy_(piece_pattern(o, n, seed));
  }
}

bool holds(const at::Tensor& t, int64_t seed) {
  for (int64_t o = 0; o < t.numel(); o += kPiece) {
    int64_t n = std::min(kPiece, t.numel() - o);
    if (!at::equal(t.narrow(0, o, n), piece_pattern(o, n, seed))) return false;
  }
  return true;
}

}  // namespace

TEST_CASE("broadcast and all_gather past 2^31 bytes and elements", "[.large]") {
  const int64_t big = (int64_t{1} << 31) + 24;  // more elements (and bytes) than an int holds
  {
    at::Tensor x = at::zeros({big}, at::kByte);
    fill(x, g_me.rank == 0 ? 7 : 0);
    g_comm->broadcast(x, 0);
    CHECK(holds(x, 7));
  }
  {
    const int64_t shard = big / g_me.world_size + 1;
    at::Tensor full = at::zeros({shard * g_me.world_size}, at::kByte);
    at::Tensor mine = at::empty({shard}, at::kByte);
    fill(mine, 100 + g_me.rank);
    g_comm->all_gather(mine, full);
    for (int r = 0; r < g_me.world_size; ++r) CHECK(holds(full.narrow(0, r * shard, shard), 100 + r));
  }
}
