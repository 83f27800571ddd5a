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
