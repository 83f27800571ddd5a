#include "areal/util/bfloat16_rows.h"

#include <cstring>

#include "areal/util/vector_clones.h"

namespace areal {
namespace {

typedef uint16_t Halves __attribute__((vector_size(32)));
typedef uint32_t Words __attribute__((vector_size(64)));
constexpr int64_t kLanes = 16;

}  // namespace

AREAL_VECTOR_CLONES void widen_bfloat16(const uint16_t* __restrict from, int64_t n, int64_t stride, int64_t dim,
                                        float* __restrict to) {
  for (int64_t l = 0; l < n; ++l) {
    const uint16_t* row = from + l * stride;
    float* out = to + l * dim;
    int64_t d = 0;
    for (; d + kLanes <= dim; d += kLanes) {
      Halves half;
      __builtin_memcpy(&half, row + d, sizeof half);
      const Words word = __builtin_convertvector(half, Words) << 16;
      __builtin_memcpy(out + d, &word, sizeof word);
    }
    for (; d < dim; ++d) {
      const uint32_t word = static_cast<uint32_t>(row[d]) << 16;
      __builtin_memcpy(out + d, &word, sizeof word);
    }
  }
}

AREAL_VECTOR_CLONES void narrow_to_bfloat16(const float* __restrict from, uint16_t* __restrict to, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Words word;
    __builtin_memcpy(&word, from + i, sizeof word);
    word = (word & 0x7fffffffu) > 0x7f800000u ? word | 0x400000u : word + 0x7fffu + ((word >> 16) & 1u);
    const Halves half = __builtin_convertvector(word >> 16, Halves);
    __builtin_memcpy(to + i, &half, sizeof half);
  }
  for (; i < n; ++i) {
    uint32_t word;
    __builtin_memcpy(&word, from + i, sizeof word);
    word = (word & 0x7fffffffu) > 0x7f800000u ? word | 0x400000u : word + 0x7fffu + ((word >> 16) & 1u);
    to[i] = static_cast<uint16_t>(word >> 16);
  }
}

AREAL_VECTOR_CLONES void round_to_bfloat16(float* __restrict v, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Words word;
    __builtin_memcpy(&word, v + i, sizeof word);
    word = ((word & 0x7fffffffu) > 0x7f800000u ? word : word + 0x7fffu + ((word >> 16) & 1u)) & 0xffff0000u;
    __builtin_memcpy(v + i, &word, sizeof word);
  }
  for (; i < n; ++i) {
    uint32_t word;
    __builtin_memcpy(&word, v + i, sizeof word);
    word = ((word & 0x7fffffffu) > 0x7f800000u ? word : word + 0x7fffu + ((word >> 16) & 1u)) & 0xffff0000u;
    __builtin_memcpy(v + i, &word, sizeof word);
  }
}

// Two 8 x 8 tiles, one in each 128-bit half of the rows r[0..8), transposed in place by
// interleaving 16-, 32- and 64-bit pieces within those halves (the in-lane unpacks every
// x86 vector unit has; a shuffle across the halves at 16 bits would not be one).
inline __attribute__((always_inline)) void transpose_eights(Halves (&r)[8]) {
  Halves t[8], u[8];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    t[2 * i] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 0, 16, 1, 17, 2, 18, 3, 19, 8, 24, 9, 25, 10, 26, 11, 27);
    t[2 * i + 1] = __builtin_shufflevector(r[2 * i], r[2 * i + 1], 4, 20, 5, 21, 6, 22, 7, 23, 12, 28, 13, 29, 14, 30, 15, 31);
  }
  const int first[4] = {0, 1, 4, 5};
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const Halves &a = t[first[k]], &b = t[first[k] + 2];
    u[2 * k] = __builtin_shufflevector(a, b, 0, 1, 16, 17, 2, 3, 18, 19, 8, 9, 24, 25, 10, 11, 26, 27);
    u[2 * k + 1] = __builtin_shufflevector(a, b, 4, 5, 20, 21, 6, 7, 22, 23, 12, 13, 28, 29, 14, 15, 30, 31);
  }
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    r[2 * k] = __builtin_shufflevector(u[k], u[k + 4], 0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27);
    r[2 * k + 1] = __builtin_shufflevector(u[k], u[k + 4], 4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31);
  }
}

// A 16 x 16 tile: its two 8-row halves each transposed as two 8 x 8 tiles, then output
// row i (< 8) joins the halves' low 128 bits, row 8 + i their high 128 bits.
AREAL_VECTOR_CLONES void transpose_bfloat16(const uint16_t* __restrict from, int64_t rows, int64_t cols,
                                            int64_t from_stride, uint16_t* __restrict to, int64_t to_stride) {
  const int64_t whole_rows = rows / kLanes * kLanes, whole_cols = cols / kLanes * kLanes;
  for (int64_t r0 = 0; r0 < whole_rows; r0 += kLanes)
    for (int64_t c0 = 0; c0 < whole_cols; c0 += kLanes) {
      Halves top[8], bottom[8];
#pragma GCC unroll 8
      for (int64_t i = 0; i < 8; ++i) {
        __builtin_memcpy(&top[i], from + (r0 + i) * from_stride + c0, sizeof(Halves));
        __builtin_memcpy(&bottom[i], from + (r0 + 8 + i) * from_stride + c0, sizeof(Halves));
      }
      transpose_eights(top);
      transpose_eights(bottom);
#pragma GCC unroll 8
      for (int64_t i = 0; i < 8; ++i) {
        const Halves low = __builtin_shufflevector(top[i], bottom[i], 0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23);
        const Halves high =
            __builtin_shufflevector(top[i], bottom[i], 8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31);
        __builtin_memcpy(to + (c0 + i) * to_stride + r0, &low, sizeof low);
        __builtin_memcpy(to + (c0 + 8 + i) * to_stride + r0, &high, sizeof high);
      }
    }
  for (int64_t r = 0; r < rows; ++r)  // the edges: the last rows % 16 rows, the last cols % 16 columns
    for (int64_t c = r < whole_rows ? whole_cols : 0; c < cols; ++c) to[c * to_stride + r] = from[r * from_stride + c];
}

void read_floats(const void* from, bool bfloat16, int64_t n, float* to) {
  if (bfloat16)
    widen_bfloat16(static_cast<const uint16_t*>(from), 1, n, n, to);
  else
    std::memcpy(to, from, n * sizeof(float));
}

void write_floats(const float* from, bool bfloat16, int64_t n, void* to) {
  if (bfloat16)
    narrow_to_bfloat16(from, static_cast<uint16_t*>(to), n);
  else
    std::memcpy(to, from, n * sizeof(float));
}

}  // namespace areal
