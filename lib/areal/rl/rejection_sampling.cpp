#include "areal/rl/rejection_sampling.h"

#include <ATen/ATen.h>

#include <cmath>

#include "areal/rl/advantages.h"

namespace areal {

RejectionSamplingConfig effective_rejection_sampling(const ActorConfig& actor) {
  if (actor.behav_imp_weight_cap == 0.0) return actor.rejection_sampling;
  RejectionSamplingConfig rs;
  rs.level = "token";
  rs.action = "mask";
  rs.metric = "ratio";
  rs.upper = actor.behav_imp_weight_cap;
  return rs;
}

namespace {

at::Tensor in_bounds(const at::Tensor& value, const RejectionSamplingConfig& rs) {
  at::Tensor ok = value <= rs.upper;
  if (std::isfinite(rs.lower)) ok = ok & (value >= rs.lower);
  return ok;
}

// Each row's aggregate of `values` over its `mask`ed tokens, [rows, 1]. A row without
// such tokens gets 0 for max (it has nothing to filter).
at::Tensor aggregate_rows(const at::Tensor& values, const at::Tensor& mask, const std::string& agg) {
  const at::Tensor on = mask > 0;
  if (agg == "max") {
    at::Tensor best = values.masked_fill(~on, -INFINITY).amax(1, /*keepdim=*/true);
    return at::where(on.any(1, /*keepdim=*/true), best, at::zeros_like(best));
  }
  at::Tensor sum = (values * mask).sum(1, /*keepdim=*/true);
  if (agg == "sum") return sum;
  return sum / mask.sum(1, /*keepdim=*/true).clamp_min(1);  // mean
}

}  // namespace

RejectionResult apply_rejection_sampling(const at::Tensor& proximal_logp, const at::Tensor& behaviour_logp,
                                         const at::Tensor& loss_mask, const RejectionSamplingConfig& rs) {
  const at::Tensor mask = loss_mask.to(at::kFloat);
  at::Tensor log_r = proximal_logp.detach().to(at::kFloat) - behaviour_logp.detach().to(at::kFloat);
  log_r = at::where(at::isfinite(log_r), log_r, at::zeros_like(log_r));  // -inf - -inf: no evidence
  const bool ratio = rs.metric == "ratio";
  // The metric per token; for ratio kept as log r, so aggregates are taken in log space.
  const at::Tensor metric = ratio ? log_r : kl_estimate(log_r, at::zeros_like(log_r), rs.metric.substr(3));
  const auto to_metric_space = [&](const at::Tensor& v) { return ratio ? v.exp() : v; };

  at::Tensor weight = log_r.exp();
  at::Tensor ok;  // in bounds, per token
  if (rs.level == "sequence") {
    if (ratio) weight = aggregate_rows(log_r, mask, "mean").exp().expand_as(log_r);
    ok = in_bounds(to_metric_space(aggregate_rows(metric, mask, rs.agg)), rs).expand_as(log_r);
  } else {
    ok = in_bounds(to_metric_space(metric), rs);
  }

  RejectionResult out;
  const at::Tensor valid = mask > 0;
  if (rs.action == "clamp") {
    const double lower = std::isfinite(rs.lower) ? rs.lower : 0.0;
    const at::Tensor clamped = at::where(ok, weight, weight.clamp(lower, rs.upper));
    out.filtered_tokens = (valid & (clamped != weight)).sum().item<double>();
    weight = clamped;
    out.kept = mask;
  } else {
    out.filtered_tokens = (valid & ~ok).sum().item<double>();
    out.kept = mask * ok.to(at::kFloat);
  }
  out.weights = at::where(out.kept > 0, weight, at::zeros_like(weight));
  return out;
}

}  // namespace areal
