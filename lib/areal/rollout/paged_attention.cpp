#include "areal/rollout/paged_attention.h"

#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>

#include <cmath>
#include <type_traits>
#include <vector>

namespace areal {
namespace {

// Four running sums: the compiler keeps them in one vector register.
inline float dot(const float* a, const float* b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  for (; d < n; ++d) s0 += a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
}

// A cached key or value as float32: float32 ones are read in place, others converted
// into `buffer`.
template <typename T>
inline const float* as_float(const T* x, std::vector<float>& buffer) {
  if constexpr (std::is_same_v<T, float>) {
    return x;
  } else {
    for (size_t d = 0; d < buffer.size(); ++d) buffer[d] = static_cast<float>(x[d]);
    return buffer.data();
  }
}

// One (row, key/value head) at a time: the head's g query heads against the row's
// tokens, block by block; softmax and the weighted sum in float32.
template <typename T>
void decode_from_blocks(const at::Tensor& q, const at::Tensor& key_pool, const at::Tensor& value_pool,
                        const at::Tensor& tables, const at::Tensor& lengths, at::Tensor& out, float scale,
                        float softcap, int64_t window) {
  const int64_t rows = q.size(0), heads = q.size(1), dim = q.size(3);
  const int64_t block = key_pool.size(1), kv_heads = key_pool.size(2), group = heads / kv_heads;
  const int64_t max_blocks = tables.size(1);
  const T* queries = q.data_ptr<T>();
  const T* keys = key_pool.data_ptr<T>();
  const T* values = value_pool.data_ptr<T>();
  const int64_t* table_of = tables.data_ptr<int64_t>();
  const int64_t* length_of = lengths.data_ptr<int64_t>();
  T* result = out.data_ptr<T>();

  at::parallel_for(0, rows * kv_heads, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> query(group * dim), sum(group * dim), buffer(dim), scores, normalizer(group);
    for (int64_t item = begin; item < end; ++item) {
      // A sliding layer reads the row's last `window` tokens: positions first .. end - 1.
      const int64_t b = item / kv_heads, j = item % kv_heads, end = length_of[b];
      const int64_t first = window > 0 ? std::max<int64_t>(0, end - window) : 0, length = end - first;
      const int64_t* table = table_of + b * max_blocks;
      auto slot = [&](int64_t l) {
        l += first;
        return ((table[l / block] * block + l % block) * kv_heads + j) * dim;
      };
      const T* q_group = queries + (b * heads + j * group) * dim;  // the group's query heads, contiguous
      for (int64_t x = 0; x < group * dim; ++x) query[x] = static_cast<float>(q_group[x]) * scale;

      scores.resize(group * length);
      for (int64_t l = 0; l < length; ++l) {
        const float* k = as_float(keys + slot(l), buffer);
        for (int64_t g = 0; g < group; ++g) scores[g * length + l] = dot(query.data() + g * dim, k, dim);
      }
      if (softcap > 0)
        for (float& s : scores) s = std::tanh(s / softcap) * softcap;
      for (int64_t g = 0; g < group; ++g) {
        float* s = scores.data() + g * length;
        float top = s[0];
        for (int64_t l = 1; l < length; ++l) top = std::max(top, s[l]);
        float total = 0;
        for (int64_t l = 0; l < length; ++l) total += (s[l] = std::exp(s[l] - top));
        normalizer[g] = 1.0f / total;
      }
      std::fill(sum.begin(), sum.end(), 0.0f);
      for (int64_t l = 0; l < length; ++l) {
        const float* v = as_float(values + slot(l), buffer);
        for (int64_t g = 0; g < group; ++g) {
          const float p = scores[g * length + l] * normalizer[g];
          float* acc = sum.data() + g * dim;
          for (int64_t d = 0; d < dim; ++d) acc[d] += p * v[d];
        }
      }
      T* out_group = result + (b * heads + j * group) * dim;
      for (int64_t x = 0; x < group * dim; ++x) out_group[x] = static_cast<T>(sum[x]);
    }
  });
}

}  // namespace

at::Tensor paged_decode_attention(const at::Tensor& q, const at::Tensor& key_pool, const at::Tensor& value_pool,
                                  const at::Tensor& tables, const at::Tensor& lengths, int64_t longest, double scale,
                                  double softcap, int64_t window) {
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
