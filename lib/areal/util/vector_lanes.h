// Helpers over 16 floats at a time, the CPU kernels' vector lanes (GCC's vector type; see
// vector_clones.h): e^x and the rounding to bfloat16. Always inlined, so each clone gets
// its own instructions; vectors by reference (by value they would change the ABI
// between the clones).
#pragma once

#include <cstdint>

namespace areal {

typedef float FloatLanes __attribute__((vector_size(64)));

// x <- e^x for x <= 0 (scores less their maximum): 2^k e^r with x = k ln 2 + r, |r| <= ln 2 / 2,
// e^r by Cephes' degree-5 polynomial (within 2 ulp of std::exp), 2^k through the
// exponent bits; x clamped at -87 (e^-87 ~ 1.6e-38: a weight that no longer counts).
inline __attribute__((always_inline)) void exp_of_nonpositive(FloatLanes& x) {
  typedef int32_t Ints __attribute__((vector_size(64)));
  constexpr float kLowest = -87.0f;
  x = x < kLowest ? kLowest : x;
  const FloatLanes scaled = x * 1.44269504088896341f + 0.5f;  // k = floor(x / ln 2 + 1/2)
  Ints k = __builtin_convertvector(scaled, Ints);
  k += __builtin_convertvector(k, FloatLanes) > scaled;  // truncation rounded up below zero: minus 1
  const FloatLanes kf = __builtin_convertvector(k, FloatLanes);
  const FloatLanes r = x - kf * 0.693359375f - kf * -2.12194440e-4f;
  FloatLanes poly = r * 1.9875691500e-4f + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  const Ints bits = (k + 127) << 23;
  FloatLanes two_k;
  __builtin_memcpy(&two_k, &bits, sizeof two_k);
  x = (poly * r * r + r + 1.0f) * two_k;
}

// v <- v rounded to bfloat16 and back (to nearest even; a NaN stays a NaN).
inline __attribute__((always_inline)) void round_to_bfloat16(FloatLanes& v) {
  typedef uint32_t Words __attribute__((vector_size(64)));
  Words word;
  __builtin_memcpy(&word, &v, sizeof word);
  word = ((word & 0x7fffffffu) > 0x7f800000u ? word : word + 0x7fffu + ((word >> 16) & 1u)) & 0xffff0000u;
  __builtin_memcpy(&v, &word, sizeof v);
}

}  // namespace areal
