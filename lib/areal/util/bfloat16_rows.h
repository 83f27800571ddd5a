// bfloat16 <-> float32 over rows, 16 values at a time (the CPU kernels' conversions:
// the paged attention's key/value blocks, the fused RMSNorm's rows).
#pragma once

#include <cstdint>

namespace areal {

// `n` rows of `dim` bfloat16 values (row stride `stride`) as float32 rows in `to` (row
// stride dim): a bfloat16's 16 bits are a float's upper half (exact).
void widen_bfloat16(const uint16_t* from, int64_t n, int64_t stride, int64_t dim, float* to);

// `n` float32 values as bfloat16, rounded to the nearest even as c10::BFloat16 rounds
// (a NaN stays a NaN).
void narrow_to_bfloat16(const float* from, uint16_t* to, int64_t n);

// Each of `n` values rounded to bfloat16 and back, in place (what torch's .to(bfloat16)
// of a float32 tensor keeps).
void round_to_bfloat16(float* v, int64_t n);

// to [cols, rows] (row stride to_stride) = the transpose of from [rows, cols] (row
// stride from_stride), 16 x 16 tiles at a time, the edges one value at a time.
void transpose_bfloat16(const uint16_t* from, int64_t rows, int64_t cols, int64_t from_stride, uint16_t* to,
                        int64_t to_stride);

// `n` values at `from`, bfloat16 (with `bfloat16`) or float32, as float32 in `to`; and
// float32 values written back in either.
void read_floats(const void* from, bool bfloat16, int64_t n, float* to);
void write_floats(const float* from, bool bfloat16, int64_t n, void* to);

}  // namespace areal
