#include "areal/model/rotary.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>

#include "areal/model/fused_rotary.h"

namespace areal {

namespace {

// transformers' YaRN helpers (modeling_rope_utils.py): the dimension at which a
// frequency makes `rotations` turns over the original context, and the ramp between.
double correction_dim(double rotations, int64_t dim, double base, int64_t context) {
  return (static_cast<double>(dim) * std::log(static_cast<double>(context) / (rotations * 2 * M_PI))) /
         (2 * std::log(base));
}

double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

}  // namespace

at::Tensor rope_inverse_frequencies(const ModelConfig& c, int64_t seq_len) {
  const int64_t dim = c.head_dim;
  const RopeScaling& r = c.rope_scaling;
  at::Tensor exponent = at::arange(0, dim, 2, at::kLong).to(at::kFloat) / dim;
  double base = c.rope_theta;
  if (r.type == "dynamic") {  // NTK: a larger base once the call reaches past max_position_embeddings
    const double context = static_cast<double>(c.max_position_embeddings);
    const double length = std::max(static_cast<double>(seq_len), context);
    base *= std::pow(r.factor * length / context - (r.factor - 1), static_cast<double>(dim) / (dim - 2));
  }
  at::Tensor pos_freqs = at::pow(base, exponent);
  at::Tensor inv_freq = 1.0 / pos_freqs;  // [head_dim / 2]
  if (r.type == "linear") return inv_freq / r.factor;
  if (r.type == "llama3") {
    const double context = static_cast<double>(r.original_max_position_embeddings);
    const double low_wavelen = context / r.low_freq_factor, high_wavelen = context / r.high_freq_factor;
    const at::Tensor wavelen = 2 * M_PI / inv_freq;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / r.factor, inv_freq);
    const at::Tensor smooth = (context / wavelen - r.low_freq_factor) / (r.high_freq_factor - r.low_freq_factor);
    const at::Tensor smoothed = (1 - smooth) * scaled / r.factor + smooth * scaled;
    const at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    return at::where(medium, smoothed, scaled);
  }
  if (r.type == "yarn") {
    double low = correction_dim(r.beta_fast, dim, c.rope_theta, r.original_max_position_embeddings);
    double high = correction_dim(r.beta_slow, dim, c.rope_theta, r.original_max_position_embeddings);
    if (r.truncate) {
      low = std::floor(low);
      high = std::ceil(high);
    }
    low = std::max(low, 0.0);
    high = std::min(high, static_cast<double>(dim - 1));
    if (low == high) high += 0.001;  // no division by zero
    const at::Tensor ramp = ((at::arange(dim / 2, at::kFloat) - low) / (high - low)).clamp(0, 1);
    const at::Tensor extrapolation = 1 - ramp;
    const at::Tensor interpolation = 1.0 / (r.factor * pos_freqs);
    return interpolation * (1 - extrapolation) + inv_freq * extrapolation;
  }
  return inv_freq;
}

double rope_attention_scaling(const ModelConfig& c) {
  const RopeScaling& r = c.rope_scaling;
  if (r.type != "yarn") return 1.0;
  if (r.attention_factor >= 0) return r.attention_factor;
  if (r.mscale != 0 && r.mscale_all_dim != 0)
    return yarn_mscale(r.factor, r.mscale) / yarn_mscale(r.factor, r.mscale_all_dim);
  return yarn_mscale(r.factor, 1);
}

std::pair<at::Tensor, at::Tensor> rotary_cos_sin(const at::Tensor& positions, const ModelConfig& config,
                                                 at::ScalarType dtype, const at::Tensor& sequence_lengths) {
  auto f32 = positions.options().dtype(at::kFloat);
  at::Tensor freqs;  // [B, T, head_dim / 2]
  if (config.rope_scaling.type == "dynamic" && positions.numel() > 0) {
    // Dynamic NTK, per sequence: each token's frequencies for its sequence's length (its
    // row's longest position + 1 unless given), as transformers computes them for that
    // sequence alone; one table per distinct length.
    const at::Tensor lengths = (sequence_lengths.defined()
                                    ? sequence_lengths
                                    : std::get<0>(positions.max(1, /*keepdim=*/true)).add(1).expand_as(positions))
                                   .to(at::kCPU, at::kLong).contiguous();
    const at::Tensor distinct = std::get<0>(at::_unique(lengths.reshape({-1})));
    std::vector<at::Tensor> tables;
    for (int64_t i = 0; i < distinct.numel(); ++i)
      tables.push_back(rope_inverse_frequencies(config, distinct[i].item<int64_t>()));
    const at::Tensor which = at::searchsorted(distinct, lengths.reshape({-1})).view(lengths.sizes());
    const at::Tensor inv_freq = at::stack(tables).index_select(0, which.reshape({-1})).view(
        {positions.size(0), positions.size(1), -1});
    freqs = positions.to(f32).unsqueeze(-1) * inv_freq.to(positions.device());
  } else {
    const at::Tensor inv_freq = rope_inverse_frequencies(config).to(positions.device());
    freqs = positions.to(f32).unsqueeze(-1) * inv_freq;
  }
  at::Tensor angles = at::cat({freqs, freqs}, -1);
  const double scaling = rope_attention_scaling(config);
  if (scaling == 1.0) return {angles.cos().to(dtype), angles.sin().to(dtype)};
  return {(angles.cos() * scaling).to(dtype), (angles.sin() * scaling).to(dtype)};
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  if (fuses_rotary(x, cos, sin)) return fused_rotary(x, cos, sin);
  const int64_t half = x.size(-1) / 2;
  at::Tensor rotated = at::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
}

}  // namespace areal
