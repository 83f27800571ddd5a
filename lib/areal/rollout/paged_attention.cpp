#include "areal/rollout/paged_attention.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "areal/util/bfloat16_rows.h"
#include "areal/util/vector_clones.h"
#include "areal/util/vector_lanes.h"

namespace areal {
namespace {

// 16 floats: one AVX-512 register, two AVX2 ones, four SSE ones in each clone (GCC's
// vector extension: the compiler picks the instructions, no intrinsics).
typedef float Lanes __attribute__((vector_size(64)));
typedef float Lanes8 __attribute__((vector_size(32)));
typedef float Lanes4 __attribute__((vector_size(16)));
typedef float Lanes2 __attribute__((vector_size(8)));
constexpr int64_t kLanes = 16;

// scores[g * stride + l] = queries[g] . keys[l] for the `group` query heads [group, dim]
// and `n` keys (key l at keys + l * key_stride). Each dot product in 16 independent
// lanes, their halves added at the end: a fixed order, so it vectorizes without
// reordering a float sum. (Written out here: a helper of the baseline target would not
// be inlined into the clones.)
AREAL_VECTOR_CLONES void block_scores(const float* __restrict queries, int64_t group, int64_t dim,
                                      const float* __restrict keys, int64_t key_stride, int64_t n,
                                      float* __restrict scores, int64_t stride) {
  if (dim % kLanes == 0) {  // whole registers: the query heads' dot products side by side
    const int64_t chunks = dim / kLanes;
    for (int64_t l = 0; l < n; ++l) {
      const float* key = keys + l * key_stride;
      for (int64_t g = 0; g < group; ++g) {
        const float* query = queries + g * dim;
        Lanes lane = {};
        for (int64_t c = 0; c < chunks; ++c) {
          Lanes q, k;
          __builtin_memcpy(&q, query + c * kLanes, sizeof q);
          __builtin_memcpy(&k, key + c * kLanes, sizeof k);
          lane += q * k;
        }
        const Lanes8 half = __builtin_shufflevector(lane, lane, 0, 1, 2, 3, 4, 5, 6, 7) +
                            __builtin_shufflevector(lane, lane, 8, 9, 10, 11, 12, 13, 14, 15);
        const Lanes4 quarter = __builtin_shufflevector(half, half, 0, 1, 2, 3) + __builtin_shufflevector(half, half, 4, 5, 6, 7);
        const Lanes2 eighth = __builtin_shufflevector(quarter, quarter, 0, 1) + __builtin_shufflevector(quarter, quarter, 2, 3);
        scores[g * stride + l] = eighth[0] + eighth[1];
      }
    }
    return;
  }
  for (int64_t l = 0; l < n; ++l) {
    const float* __restrict key = keys + l * key_stride;
    for (int64_t g = 0; g < group; ++g) {
      const float* __restrict query = queries + g * dim;
      float lane[kLanes] = {};
      int64_t d = 0;
      for (; d + kLanes <= dim; d += kLanes)
        for (int64_t k = 0; k < kLanes; ++k) lane[k] += query[d + k] * key[d + k];
      for (; d < dim; ++d) lane[d % kLanes] += query[d] * key[d];
      for (int64_t width = kLanes / 2; width > 0; width /= 2)  // halves added: a few vector adds
        for (int64_t k = 0; k < width; ++k) lane[k] += lane[k + width];
      scores[g * stride + l] = lane[0];
    }
  }
}

// sums[g] += probs[g * stride + l] * values[l] over the `n` values of one block.
AREAL_VECTOR_CLONES void block_accumulate(const float* __restrict probs, int64_t stride, int64_t group, int64_t dim,
                                          const float* __restrict values, int64_t value_stride, int64_t n,
                                          float* __restrict sums) {
  if (dim % kLanes == 0 && dim <= 8 * kLanes) {  // a query head's sum in registers over the block
    const int64_t chunks = dim / kLanes;
    for (int64_t g = 0; g < group; ++g) {
      Lanes sum[8];
      for (int64_t c = 0; c < chunks; ++c) __builtin_memcpy(&sum[c], sums + g * dim + c * kLanes, sizeof(Lanes));
      for (int64_t l = 0; l < n; ++l) {
        const float p = probs[g * stride + l];
        const float* value = values + l * value_stride;
        for (int64_t c = 0; c < chunks; ++c) {
          Lanes v;
          __builtin_memcpy(&v, value + c * kLanes, sizeof v);
          sum[c] += p * v;
        }
      }
      for (int64_t c = 0; c < chunks; ++c) __builtin_memcpy(sums + g * dim + c * kLanes, &sum[c], sizeof(Lanes));
    }
    return;
  }
  for (int64_t l = 0; l < n; ++l) {
    const float* value = values + l * value_stride;
    for (int64_t g = 0; g < group; ++g) {
      const float p = probs[g * stride + l];
      float* __restrict sum = sums + g * dim;
      for (int64_t d = 0; d < dim; ++d) sum[d] += p * value[d];
    }
  }
}

// s[0 .. n) replaced by its softmax, 16 scores at a time: the maximum in lanes, then
// e^(s - max) (util/vector_exp.h); the last n % 16 scores in a lane padded with
// max - 87 (a weight of 0).
AREAL_VECTOR_CLONES void softmax_row(float* __restrict s, int64_t n) {
  constexpr float kLowest = -87.0f;
  const int64_t whole = n / kLanes * kLanes;  // the scores in whole lanes; the rest padded in `tail`
  float most = s[0];
  if (whole > 0) {
    Lanes top;
    __builtin_memcpy(&top, s, sizeof top);
    for (int64_t at = kLanes; at < whole; at += kLanes) {
      Lanes v;
      __builtin_memcpy(&v, s + at, sizeof v);
      top = v > top ? v : top;
    }
    for (int64_t k = 0; k < kLanes; ++k) most = std::max(most, top[k]);
  }
  for (int64_t at = whole; at < n; ++at) most = std::max(most, s[at]);
  Lanes tail;
  for (int64_t k = 0; k < kLanes; ++k) tail[k] = whole + k < n ? s[whole + k] : most + kLowest;
  Lanes total = {};
  for (int64_t at = 0; at <= whole && at < n; at += kLanes) {
    Lanes x;
    if (at < whole) __builtin_memcpy(&x, s + at, sizeof x);
    else x = tail;
    Lanes e = x - most;
    exp_of_nonpositive(e);
    if (at < whole) {
      __builtin_memcpy(s + at, &e, sizeof e);
    } else {
      for (int64_t j = 0; j < kLanes; ++j) {
        if (at + j < n) s[at + j] = e[j];
        else e[j] = 0;  // padding adds nothing
      }
    }
    total += e;
  }
  float sum = 0;
  for (int64_t k = 0; k < kLanes; ++k) sum += total[k];
  const float normalizer = 1.0f / sum;
  for (int64_t at = 0; at < n; ++at) s[at] *= normalizer;
}

// The `n` tokens of one block for key/value head j as float32 rows of `dim`: float32
// pools read in place (row stride kv_heads * dim), others converted into `buffer`
// (stride dim). Returns the rows and their stride.
template <typename T>
std::pair<const float*, int64_t> block_rows(const T* first, int64_t n, int64_t pool_stride, int64_t dim,
                                            std::vector<float>& buffer) {
  if constexpr (std::is_same_v<T, float>) {
    return {first, pool_stride};
  } else if constexpr (std::is_same_v<T, c10::BFloat16>) {
    static_assert(sizeof(c10::BFloat16) == sizeof(uint16_t));
    widen_bfloat16(reinterpret_cast<const uint16_t*>(first), n, pool_stride, dim, buffer.data());
    return {buffer.data(), dim};
  } else {
    for (int64_t l = 0; l < n; ++l)
      for (int64_t d = 0; d < dim; ++d) buffer[l * dim + d] = static_cast<float>(first[l * pool_stride + d]);
    return {buffer.data(), dim};
  }
}

// One row, or one (row, key/value head) when there are fewer rows than threads, at a
// time: each key/value head's g query heads against the row's tokens, block by block
// (a token's keys and values for all the item's heads are adjacent in the pool, read
// once); softmax and the weighted sum in float32.
template <typename T>
void decode_from_blocks(const at::Tensor& q, const at::Tensor& key_pool, const at::Tensor& value_pool,
                        const at::Tensor& tables, const at::Tensor& lengths, at::Tensor& out, float scale,
                        float softcap, int64_t window) {
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(3);
  const int64_t block = key_pool.size(1), kv_heads = key_pool.size(2), group = heads / kv_heads;
  const int64_t max_blocks = tables.size(1), pool_stride = kv_heads * dim;
  const int64_t span = rows >= at::get_num_threads() ? kv_heads : 1;  // key/value heads per item
  const int64_t item_heads = span * group;
  const T* queries = q.data_ptr<T>();
  const T* keys = key_pool.data_ptr<T>();
  const T* values = value_pool.data_ptr<T>();
  const int64_t* table_of = tables.data_ptr<int64_t>();
  const int64_t* length_of = lengths.data_ptr<int64_t>();
  T* result = out.data_ptr<T>();

  at::parallel_for(0, rows * kv_heads / span, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> query(item_heads * dim), sum(item_heads * dim), buffer(block * dim), scores;
    for (int64_t item = begin; item < end; ++item) {
      // A sliding layer reads the row's last `window` tokens: positions first .. last - 1.
      const int64_t b = item * span / kv_heads, j0 = item * span % kv_heads, last = length_of[b];
      const int64_t first = window > 0 ? std::max<int64_t>(0, last - window) : 0, length = last - first;
      const int64_t* table = table_of + b * max_blocks;
      const T* q_item = queries + (b * heads + j0 * group) * dim;  // the item's query heads, contiguous
      for (int64_t x = 0; x < item_heads * dim; ++x) query[x] = static_cast<float>(q_item[x]) * scale;
      // The row's tokens [first, last) block by block: (offset in scores, the first token's
      // pool slot for head j0, count).
      // A row's next block is elsewhere in the pool (blocks are handed out as rows grow),
      // where the hardware prefetcher does not look: its bytes are asked for ahead.
      auto for_blocks = [&](const T* pool, auto&& visit) {
        for (int64_t l = first; l < last;) {
          const int64_t n = std::min(block - l % block, last - l);
          if (const int64_t next = (l / block + 2) * block; next < last) {  // two blocks ahead
            const char* at = reinterpret_cast<const char*>(pool + (table[next / block] * block + next % block) * pool_stride);
            const int64_t bytes = std::min(block - next % block, last - next) * pool_stride * static_cast<int64_t>(sizeof(T));
            for (int64_t offset = 0; offset < bytes; offset += 64) __builtin_prefetch(at + offset);
          }
          visit(l - first, (table[l / block] * block + l % block) * pool_stride + j0 * dim, n);
          l += n;
        }
      };

      scores.resize(item_heads * length);
      for_blocks(keys, [&](int64_t at, int64_t slot, int64_t n) {
        for (int64_t j = 0; j < span; ++j) {
          auto [rows_k, stride] = block_rows(keys + slot + j * dim, n, pool_stride, dim, buffer);
          block_scores(query.data() + j * group * dim, group, dim, rows_k, stride, n,
                       scores.data() + j * group * length + at, length);
        }
      });
      if (softcap > 0)
        for (float& s : scores) s = std::tanh(s / softcap) * softcap;
      for (int64_t h = 0; h < item_heads; ++h) softmax_row(scores.data() + h * length, length);
      std::fill(sum.begin(), sum.end(), 0.0f);
      for_blocks(values, [&](int64_t at, int64_t slot, int64_t n) {
        for (int64_t j = 0; j < span; ++j) {
          auto [rows_v, stride] = block_rows(values + slot + j * dim, n, pool_stride, dim, buffer);
          block_accumulate(scores.data() + j * group * length + at, length, group, dim, rows_v, stride, n,
                           sum.data() + j * group * dim);
        }
      });
      T* out_item = result + (b * heads + j0 * group) * dim;
      for (int64_t x = 0; x < item_heads * dim; ++x) out_item[x] = static_cast<T>(sum[x]);
    }
  });
}

}  // namespace

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& key_pool, const at::Tensor& value_pool,
                                  const at::Tensor& tables, const at::Tensor& lengths, int64_t longest, double scale,
                                  double softcap, int64_t window) {
  RECORD_FUNCTION("areal::paged_decode_attention", std::vector<c10::IValue>());  // named in profiles
  if (!q.is_cpu())
    return gathered_decode_attention(q, key_pool, value_pool, tables, lengths, longest, scale, softcap, window);
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(q.size(3)));
  TORCH_CHECK(q.size(2) == 1 && q.size(1) % key_pool.size(2) == 0 && key_pool.is_contiguous() &&
                  value_pool.is_contiguous() && tables.scalar_type() == at::kLong && lengths.scalar_type() == at::kLong,
              "paged_decode_attention: one query per row, heads a multiple of the key/value heads, contiguous pools");
  const at::Tensor queries = q.contiguous(), table = tables.contiguous(), length = lengths.contiguous();
  at::Tensor out = at::empty_like(queries);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, q.scalar_type(), "paged_decode_attention", [&] {
    decode_from_blocks<scalar_t>(queries, key_pool, value_pool, table, length, out, static_cast<float>(scale),
                                 static_cast<float>(softcap), window);
  });
  return out;
}

at::Tensor gathered_decode_attention(const at::Tensor& q, const at::Tensor& key_pool, const at::Tensor& value_pool,
                                     const at::Tensor& tables, const at::Tensor& lengths, int64_t longest, double scale,
                                     double softcap, int64_t window) {
  const int64_t rows = q.size(0), block = key_pool.size(1), kv_heads = key_pool.size(2), dim = key_pool.size(3);
  const at::Tensor position = at::arange(longest, tables.options()).view({1, longest});
  at::Tensor valid = position < lengths.view({rows, 1});
  if (window > 0) valid = valid & (position >= lengths.view({rows, 1}) - window);
  // Positions past a row's length read its token 0 (always written) and are masked.
  const at::Tensor p = at::where(valid, position, at::zeros_like(position));
  const at::Tensor slots = tables.gather(1, p.div(block, "floor")) * block + p.remainder(block);
  auto gather = [&](const at::Tensor& pool) {
    return pool.view({-1, kv_heads, dim}).index_select(0, slots.reshape({-1})).view({rows, longest, kv_heads, dim})
        .transpose(1, 2);
  };
  if (scale <= 0) scale = 1.0 / std::sqrt(static_cast<double>(dim));
  const at::Tensor mask = valid.view({rows, 1, 1, longest});
  if (softcap <= 0)
    return at::scaled_dot_product_attention(q, gather(key_pool), gather(value_pool), mask, 0.0, false, scale,
                                            q.size(1) != kv_heads);
  const int64_t group = q.size(1) / kv_heads;  // soft-capped scores: as transformers' eager attention
  at::Tensor scores = at::matmul(q, gather(key_pool).repeat_interleave(group, 1).transpose(2, 3)) * scale;
  scores = (at::tanh(scores / softcap) * softcap).masked_fill(mask.logical_not(), -INFINITY);
  return at::matmul(at::softmax(scores, -1, at::kFloat).to(q.scalar_type()), gather(value_pool).repeat_interleave(group, 1));
}

}  // namespace areal
