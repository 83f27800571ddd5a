#include "areal/model/brgemm_attention.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/native/CPUBlas.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "areal/util/bfloat16_rows.h"
#include "areal/util/vector_clones.h"
#include "areal/util/vector_lanes.h"

namespace areal {
namespace {

namespace cpublas = at::native::cpublas;
typedef float Lanes __attribute__((vector_size(64)));
typedef uint32_t Words __attribute__((vector_size(64)));
typedef uint16_t Halves __attribute__((vector_size(32)));
constexpr int64_t kLanes = 16;
constexpr int64_t kPanel = 64;  // brgemm's packed right-hand side: panels of 16, 32, 48 or 64 columns

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }
const at::BFloat16* bf16(const uint16_t* p) { return reinterpret_cast<const at::BFloat16*>(p); }

// ---- Row operations, 16 lanes at a time ----
//
// The score rows hold `width` floats, a multiple of 16 and at least n rounded up to 16:
// a row's last lane is read whole, its lanes from n on masked. Probabilities and score
// gradients leave as their two bfloat16 parts, `hi` and `lo`, zero from n to width.

// Vectors pass by reference: by value they would change the ABI between the clones.
inline __attribute__((always_inline)) void mask(Lanes& x, int64_t at, int64_t n, float fill) {
  const Lanes lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  x = lane < static_cast<float>(n - at) ? x : fill;
}

// x = hi + lo: hi = x rounded to bfloat16, lo = the rest rounded likewise (hi + lo within
// 2^-16 of x, relatively); 16 of each stored.
inline __attribute__((always_inline)) void store_split(const Lanes& x, uint16_t* hi, uint16_t* lo) {
  Lanes high = x;
  round_to_bfloat16(high);
  Lanes rest = x - high;
  round_to_bfloat16(rest);
  Words high_bits, rest_bits;  // a rounded float's bfloat16 is its upper half
  __builtin_memcpy(&high_bits, &high, sizeof high_bits);
  __builtin_memcpy(&rest_bits, &rest, sizeof rest_bits);
  const Halves hi16 = __builtin_convertvector(high_bits >> 16, Halves);
  const Halves lo16 = __builtin_convertvector(rest_bits >> 16, Halves);
  __builtin_memcpy(hi, &hi16, sizeof hi16);
  __builtin_memcpy(lo, &lo16, sizeof lo16);
}

void clear_tail(uint16_t* hi, uint16_t* lo, int64_t n, int64_t width) {
  const int64_t from = (n + kLanes - 1) / kLanes * kLanes;
  std::fill(hi + from, hi + width, uint16_t{0});
  std::fill(lo + from, lo + width, uint16_t{0});
}

// e <- e^(s[at ..] * scale - shift), its lanes from n on 0, and back into s.
inline __attribute__((always_inline)) void shifted_exp(float* s, int64_t at, int64_t n, float scale, float shift,
                                                      Lanes& e) {
  __builtin_memcpy(&e, s + at, sizeof e);
  e = e * scale - shift;
  exp_of_nonpositive(e);
  mask(e, at, n, 0.0f);
  __builtin_memcpy(s + at, &e, sizeof e);
}

// softmax(s[0 .. n) * scale) into hi and lo; returns log(sum(e^(s * scale))).
AREAL_VECTOR_CLONES float causal_softmax(float* __restrict s, int64_t n, float scale, int64_t width,
                                         uint16_t* __restrict hi, uint16_t* __restrict lo) {
  constexpr float kLowest = -3.0e38f;
  Lanes top = {};
  for (int64_t at = 0; at < n; at += kLanes) {
    Lanes x;
    __builtin_memcpy(&x, s + at, sizeof x);
    x *= scale;
    mask(x, at, n, kLowest);
    top = at == 0 ? x : (x > top ? x : top);
  }
  float most = top[0];
  for (int64_t k = 1; k < kLanes; ++k) most = std::max(most, top[k]);
  Lanes total = {};
  for (int64_t at = 0; at < n; at += kLanes) {
    Lanes e;
    shifted_exp(s, at, n, scale, most, e);
    total += e;
  }
  float sum = 0;
  for (int64_t k = 0; k < kLanes; ++k) sum += total[k];
  const float normalizer = 1.0f / sum;
  for (int64_t at = 0; at < n; at += kLanes) {
    Lanes x;
    __builtin_memcpy(&x, s + at, sizeof x);
    store_split(x * normalizer, hi + at, lo + at);
  }
  clear_tail(hi, lo, n, width);
  return most + std::log(sum);
}

// s[0 .. n) <- e^(s * scale - lse), the forward's probabilities again, and into hi and lo.
AREAL_VECTOR_CLONES void causal_probabilities(float* __restrict s, int64_t n, float scale, float lse, int64_t width,
                                              uint16_t* __restrict hi, uint16_t* __restrict lo) {
  for (int64_t at = 0; at < n; at += kLanes) {
    Lanes e;
    shifted_exp(s, at, n, scale, lse, e);
    store_split(e, hi + at, lo + at);
  }
  clear_tail(hi, lo, n, width);
}

// The scores' gradient p * (dp - d) * scale into hi and lo.
AREAL_VECTOR_CLONES void score_gradient(const float* __restrict dp, const float* __restrict p, float d, float scale,
                                        int64_t n, int64_t width, uint16_t* __restrict hi, uint16_t* __restrict lo) {
  for (int64_t at = 0; at < n; at += kLanes) {
    Lanes g, x;
    __builtin_memcpy(&g, dp + at, sizeof g);
    __builtin_memcpy(&x, p + at, sizeof x);
    store_split(x * (g - d) * scale, hi + at, lo + at);  // p is 0 past n
  }
  clear_tail(hi, lo, n, width);
}

// The sum of a[i] * b[i] over two bfloat16 rows (n a multiple of 16), in float32.
AREAL_VECTOR_CLONES float bfloat16_dot(const uint16_t* __restrict a, const uint16_t* __restrict b, int64_t n) {
  Lanes acc = {};
  for (int64_t i = 0; i < n; i += kLanes) {
    Halves x, y;
    __builtin_memcpy(&x, a + i, sizeof x);
    __builtin_memcpy(&y, b + i, sizeof y);
    const Words xw = __builtin_convertvector(x, Words) << 16, yw = __builtin_convertvector(y, Words) << 16;
    Lanes xf, yf;
    __builtin_memcpy(&xf, &xw, sizeof xf);
    __builtin_memcpy(&yf, &yw, sizeof yf);
    acc += xf * yf;
  }
  float sum = 0;
  for (int64_t k = 0; k < kLanes; ++k) sum += acc[k];
  return sum;
}

// ---- Matrices of one item ----

// A right-hand side B [K, N] (K even, N a multiple of 16) packed for brgemm panel by panel.
class PackedMatrix {
 public:
  void pack(int64_t k, int64_t n, const uint16_t* b, int64_t ld) {
    k_ = k;
    n_ = n;
    data_.resize(static_cast<size_t>(k * round_up(n, kPanel)));
    for (int64_t col = 0; col < n; col += kPanel) {
      const int64_t width = std::min(kPanel, n - col);
      cpublas::pack(k, width, ld, width, at::kBFloat16, at::kBFloat16, b + col, data_.data() + col * k);
    }
  }
  // c [m, N] (row stride ldc) = a [m, K] (row stride lda) times B, or += with `accumulate`.
  void multiply(int64_t m, const uint16_t* a, int64_t lda, float* c, int64_t ldc, bool accumulate) const {
    for (int64_t col = 0; col < n_; col += kPanel) {
      const int64_t width = std::min(kPanel, n_ - col);
      cpublas::brgemm(m, width, k_, lda, width, ldc, accumulate, bf16(a), bf16(data_.data() + col * k_), c + col,
                      /*is_vnni=*/true);
    }
  }
  // c = (hi + lo) times B, the two parts of one float32 left-hand side.
  void multiply_split(int64_t m, const uint16_t* hi, const uint16_t* lo, int64_t lda, float* c, int64_t ldc) const {
    multiply(m, hi, lda, c, ldc, false);
    multiply(m, lo, lda, c, ldc, true);
  }

 private:
  int64_t k_ = 0, n_ = 0;
  std::vector<uint16_t> data_;
};

// [B, heads, T, D] bfloat16, the last dimension contiguous: row (b, h, t).
struct HeadRows {
  uint16_t* data;
  int64_t s0, s1, s2;
  explicit HeadRows(const at::Tensor& x)
      : data(reinterpret_cast<uint16_t*>(const_cast<void*>(x.const_data_ptr()))),
        s0(x.stride(0)), s1(x.stride(1)), s2(x.stride(2)) {}
  uint16_t* row(int64_t b, int64_t h, int64_t t) const { return data + b * s0 + h * s1 + t * s2; }
};

// One item: row b, key/value head j, its g query heads j*g .. j*g + g - 1; the group's
// query rows stacked head by head (row m = h * T + t). Rows and columns padded with zeros
// to multiples of 16 (Mp, Tp): the packed products' and the transposes' tiles.
struct Shape {
  int64_t T, D, g, M, Mp, Tp;
};

struct Workspace {
  std::vector<uint16_t> q, k, v, dout, transposed, hi, lo, p_hi, p_lo;
  std::vector<float> s, dp, c, d, rows;
  PackedMatrix keys, values, left, right;

  void size(const Shape& x) {
    for (auto* m : {&q, &dout}) m->resize(static_cast<size_t>(x.Mp * x.D));
    for (auto* m : {&k, &v}) m->resize(static_cast<size_t>(x.Tp * x.D));
    for (auto* m : {&hi, &lo, &p_hi, &p_lo}) m->resize(static_cast<size_t>(x.Mp * x.Tp));
    transposed.resize(static_cast<size_t>(x.D * x.Mp));
    for (auto* m : {&s, &dp}) m->resize(static_cast<size_t>(x.M * x.Tp));
    c.resize(static_cast<size_t>(x.Mp * x.D));  // [M, D] or [D, Tp]
    d.resize(static_cast<size_t>(x.M));
    rows.resize(static_cast<size_t>(x.T * x.D));
  }
};

// rows [padded, D] <- the item's rows of x (g heads from `head` on, T tokens each), zero after.
void gather(const HeadRows& x, int64_t b, int64_t head, int64_t g, const Shape& s, int64_t padded, uint16_t* rows) {
  for (int64_t h = 0; h < g; ++h)
    for (int64_t t = 0; t < s.T; ++t) std::memcpy(rows + (h * s.T + t) * s.D, x.row(b, head + h, t), s.D * sizeof(uint16_t));
  std::fill(rows + g * s.T * s.D, rows + padded * s.D, uint16_t{0});
}

// to [cols, rows] = the transpose of from [rows, cols].
void transpose(const uint16_t* from, int64_t rows, int64_t cols, uint16_t* to) {
  transpose_bfloat16(from, rows, cols, cols, to, rows);
}

// The scores q k^T of the item, float32 [M, Tp], in w.s.
void scores(Workspace& w, const Shape& x) {
  transpose(w.k.data(), x.Tp, x.D, w.transposed.data());  // k^T [D, Tp]
  w.keys.pack(x.D, x.Tp, w.transposed.data(), x.Tp);
  w.keys.multiply(x.M, w.q.data(), x.D, w.s.data(), x.Tp, false);
}

// c [D, Tp] -> rows t < T of (b, j) in grad (contiguous), transposed back through `rows` [T, D].
void write_transposed(const float* c, const Shape& x, const HeadRows& grad, int64_t b, int64_t j, float* rows) {
  for (int64_t t = 0; t < x.T; ++t)
    for (int64_t d = 0; d < x.D; ++d) rows[t * x.D + d] = c[d * x.Tp + t];
  narrow_to_bfloat16(rows, grad.row(b, j, 0), x.T * x.D);
}

Shape shape_of(const at::Tensor& q, const at::Tensor& k) {
  Shape s;
  s.T = q.size(2), s.D = q.size(3), s.g = q.size(1) / k.size(1), s.M = s.g * s.T;
  s.Mp = round_up(s.M, kLanes), s.Tp = round_up(s.T, kLanes);
  return s;
}

// Items (b, j) spread over the threads; the matrix units' state released after each
// thread's share.
template <typename Body>
void for_items(int64_t batch, int64_t kv_heads, const Shape& shape, const Body& body) {
  at::parallel_for(0, batch * kv_heads, 1, [&](int64_t begin, int64_t end) {
    thread_local Workspace w;  // kept between calls: fresh pages each call cost more than the products
    w.size(shape);
    for (int64_t item = begin; item < end; ++item) body(w, item / kv_heads, item % kv_heads);
    cpublas::brgemm_release(true);
  });
}

// Rows M .. Mp of split parts: zeros (they meet the zero padding of q and dout).
void clear_padding(std::vector<uint16_t>& part, const Shape& x) {
  std::fill(part.begin() + x.M * x.Tp, part.begin() + x.Mp * x.Tp, uint16_t{0});
}

std::pair<at::Tensor, at::Tensor> attention_forward(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                                    float scale) {
  RECORD_FUNCTION("areal::brgemm_attention", std::vector<c10::IValue>());  // named in profiles
  const Shape x = shape_of(q, k);
  const int64_t batch = q.size(0), kv_heads = k.size(1);
  at::Tensor out = at::empty(q.sizes(), q.options());
  at::Tensor lse = at::empty({batch, q.size(1), x.T}, q.options().dtype(at::kFloat));
  const HeadRows qs(q), ks(k), vs(v), outs(out);
  float* lse_all = lse.mutable_data_ptr<float>();
  for_items(batch, kv_heads, x, [&](Workspace& w, int64_t b, int64_t j) {
    gather(qs, b, j * x.g, x.g, x, x.Mp, w.q.data());
    gather(ks, b, j, 1, x, x.Tp, w.k.data());
    gather(vs, b, j, 1, x, x.Tp, w.v.data());
    scores(w, x);
    float* lse_item = lse_all + (b * q.size(1) + j * x.g) * x.T;  // the group's heads are adjacent: [g, T]
    for (int64_t m = 0; m < x.M; ++m)
      lse_item[m] = causal_softmax(w.s.data() + m * x.Tp, m % x.T + 1, scale, x.Tp, w.hi.data() + m * x.Tp,
                                   w.lo.data() + m * x.Tp);
    w.values.pack(x.Tp, x.D, w.v.data(), x.D);
    w.values.multiply_split(x.M, w.hi.data(), w.lo.data(), x.Tp, w.c.data(), x.D);
    for (int64_t h = 0; h < x.g; ++h)  // out is contiguous: a head's T rows at once
      narrow_to_bfloat16(w.c.data() + h * x.T * x.D, outs.row(b, j * x.g + h, 0), x.T * x.D);
  });
  return {out, lse};
}

std::vector<at::Tensor> attention_backward(const at::Tensor& dout, const at::Tensor& q, const at::Tensor& k,
                                           const at::Tensor& v, const at::Tensor& out, const at::Tensor& lse,
                                           float scale) {
  RECORD_FUNCTION("areal::brgemm_attention_backward", std::vector<c10::IValue>());
  const Shape x = shape_of(q, k);
  const int64_t batch = q.size(0), kv_heads = k.size(1);
  at::Tensor dq = at::empty(q.sizes(), q.options()), dk = at::empty(k.sizes(), k.options());
  at::Tensor dv = at::empty(v.sizes(), v.options());
  const HeadRows qs(q), ks(k), vs(v), outs(out), douts(dout), dqs(dq), dks(dk), dvs(dv);
  const float* lse_all = lse.const_data_ptr<float>();
  for_items(batch, kv_heads, x, [&](Workspace& w, int64_t b, int64_t j) {
    gather(qs, b, j * x.g, x.g, x, x.Mp, w.q.data());
    gather(douts, b, j * x.g, x.g, x, x.Mp, w.dout.data());
    gather(ks, b, j, 1, x, x.Tp, w.k.data());
    gather(vs, b, j, 1, x, x.Tp, w.v.data());
    // The probabilities again, and d = rowsum(dout * out): softmax's backward.
    scores(w, x);
    const float* lse_item = lse_all + (b * q.size(1) + j * x.g) * x.T;
    for (int64_t m = 0; m < x.M; ++m) {
      causal_probabilities(w.s.data() + m * x.Tp, m % x.T + 1, scale, lse_item[m], x.Tp, w.p_hi.data() + m * x.Tp,
                           w.p_lo.data() + m * x.Tp);
      w.d[m] = bfloat16_dot(w.dout.data() + m * x.D, outs.row(b, j * x.g + m / x.T, m % x.T), x.D);
    }
    // dp = dout v^T, then ds = p * (dp - d) * scale.
    transpose(w.v.data(), x.Tp, x.D, w.transposed.data());
    w.values.pack(x.D, x.Tp, w.transposed.data(), x.Tp);
    w.values.multiply(x.M, w.dout.data(), x.D, w.dp.data(), x.Tp, false);
    for (int64_t m = 0; m < x.M; ++m)
      score_gradient(w.dp.data() + m * x.Tp, w.s.data() + m * x.Tp, w.d[m], scale, m % x.T + 1, x.Tp,
                     w.hi.data() + m * x.Tp, w.lo.data() + m * x.Tp);
    for (auto* part : {&w.hi, &w.lo, &w.p_hi, &w.p_lo}) clear_padding(*part, x);
    // dv^T = dout^T p and dk^T = q^T ds: the split parts as the packed right-hand side.
    auto transposed_product = [&](const std::vector<uint16_t>& hi, const std::vector<uint16_t>& lo,
                                  const std::vector<uint16_t>& rows, const HeadRows& grad) {
      w.left.pack(x.Mp, x.Tp, hi.data(), x.Tp);
      w.right.pack(x.Mp, x.Tp, lo.data(), x.Tp);
      transpose(rows.data(), x.Mp, x.D, w.transposed.data());  // [D, Mp]
      w.left.multiply(x.D, w.transposed.data(), x.Mp, w.c.data(), x.Tp, false);
      w.right.multiply(x.D, w.transposed.data(), x.Mp, w.c.data(), x.Tp, true);
      write_transposed(w.c.data(), x, grad, b, j, w.rows.data());
    };
    transposed_product(w.p_hi, w.p_lo, w.dout, dvs);
    transposed_product(w.hi, w.lo, w.q, dks);
    // dq = ds k.
    w.keys.pack(x.Tp, x.D, w.k.data(), x.D);
    w.keys.multiply_split(x.M, w.hi.data(), w.lo.data(), x.Tp, w.c.data(), x.D);
    for (int64_t h = 0; h < x.g; ++h)  // dq is contiguous
      narrow_to_bfloat16(w.c.data() + h * x.T * x.D, dqs.row(b, j * x.g + h, 0), x.T * x.D);
  });
  return {dq, dk, dv};
}

struct BrgemmAttentionFunction : public torch::autograd::Function<BrgemmAttentionFunction> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, double scale) {
    auto [out, lse] = attention_forward(q, k, v, static_cast<float>(scale));
    ctx->save_for_backward({q, k, v, out, lse});
    ctx->saved_data["scale"] = scale;
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor dout = grads[0].to(at::kBFloat16);
    auto g = attention_backward(dout.stride(3) == 1 ? dout : dout.contiguous(), saved[0], saved[1], saved[2], saved[3],
                                saved[4], static_cast<float>(ctx->saved_data["scale"].toDouble()));
    return {g[0], g[1], g[2], at::Tensor()};
  }
};

}  // namespace

bool brgemm_attention_runs(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  static const bool packs = cpublas::could_pack(at::kBFloat16);
  return packs && q.is_cpu() && q.scalar_type() == at::kBFloat16 && k.scalar_type() == at::kBFloat16 &&
         v.scalar_type() == at::kBFloat16 && q.dim() == 4 && k.dim() == 4 && v.sizes() == k.sizes() &&
         q.size(0) == k.size(0) && q.size(2) == k.size(2) && q.size(3) == k.size(3) && k.size(1) > 0 &&
         q.size(1) % k.size(1) == 0 && q.size(3) % 16 == 0 && q.size(2) > 0;
}

at::Tensor brgemm_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, std::optional<double> scale) {
  TORCH_CHECK(brgemm_attention_runs(q, k, v), "brgemm_attention: takes CPU bfloat16 [B, heads, T, D] with D % 16 == 0");
  auto rows = [](const at::Tensor& x) { return x.stride(3) == 1 ? x : x.contiguous(); };
  return BrgemmAttentionFunction::apply(rows(q), rows(k), rows(v), scale.value_or(1.0 / std::sqrt(double(q.size(3)))));
}

}  // namespace areal
