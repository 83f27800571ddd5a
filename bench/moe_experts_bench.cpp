// A sparse layer's experts two ways, side by side in one process: areal-train's grouped
// products (expert_mixture: the (token, choice) pairs sorted by expert once, each
// expert's tokens one product per projection) against a per-expert loop as
// transformers' eager Qwen3-MoE experts run it (each expert finds its tokens with a
// search over all choices, computes them and adds them back). Forward alone and
// forward + backward (gradients of the input and of every expert), float32, torch's
// threads; both give the same outputs (checked and printed).
//
//   areal_moe_experts_bench OUT.json TOKENS,... EXPERTS TOP_K HIDDEN WIDTH [REPEATS]
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "areal/model/functional.h"

using namespace areal;

namespace {

using Clock = std::chrono::steady_clock;
using P = ModelConfig::ExpertProjection;

std::vector<int64_t> numbers(const std::string& list) {
  std::vector<int64_t> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

// One sparse layer's weights by name inside the layer (the Hub's Qwen3-MoE names).
struct Layer {
  ModelConfig config;
  std::map<std::string, at::Tensor> weights;
  at::Tensor at(const std::string& name) const {
    auto it = weights.find(name);
    return it == weights.end() ? at::Tensor() : it->second;
  }
};

Layer random_layer(int64_t experts, int64_t top_k, int64_t hidden, int64_t width) {
  Layer l;
  ModelConfig& c = l.config;
  c.model_type = "qwen3_moe";
  c.hidden_size = hidden;
  c.num_experts = experts;
  c.num_experts_per_tok = top_k;
  c.moe_intermediate_size = width;
  c.norm_topk_prob = true;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(0);
  auto init = [&](int64_t out, int64_t in) { return (at::randn({out, in}, gen) / std::sqrt(in)).requires_grad_(true); };
  l.weights[c.router_weight()] = init(experts, hidden);
  for (int64_t e = 0; e < experts; ++e) {
    l.weights[c.expert_weight(e, P::Gate)] = init(width, hidden);
    l.weights[c.expert_weight(e, P::Up)] = init(width, hidden);
    l.weights[c.expert_weight(e, P::Down)] = init(hidden, width);
  }
  return l;
}

at::Tensor plain_linear(const at::Tensor& in, const Layer& l, const std::string& name) {
  return at::linear(in, l.at(name + ".weight"));
}

at::Tensor grouped(const Layer& l, const at::Tensor& x) {
  auto w = [&](const std::string& name) { return l.at(name); };
  auto linear = [&](const at::Tensor& in, const std::string& name) { return plain_linear(in, l, name); };
  return expert_mixture(l.config, w, x, linear);
}

// transformers' eager loop: every expert searches the choices for its tokens.
at::Tensor per_expert_loop(const Layer& l, const at::Tensor& x) {
  const ModelConfig& c = l.config;
  const ExpertRouting routing = route_tokens(c, l.at(c.router_weight()), x);
  at::Tensor out = at::zeros_like(x);
  auto name = [](const std::string& weight) { return weight.substr(0, weight.size() - std::string(".weight").size()); };
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const at::Tensor hit = (routing.experts == e).nonzero();  // [n, 2]: token, choice
    if (hit.size(0) == 0) continue;
    const at::Tensor token = hit.select(1, 0), choice = hit.select(1, 1);
    const at::Tensor in = x.index_select(0, token);
    at::Tensor h = at::silu(plain_linear(in, l, name(c.expert_weight(e, P::Gate)))) *
                   plain_linear(in, l, name(c.expert_weight(e, P::Up)));
    at::Tensor y = plain_linear(h, l, name(c.expert_weight(e, P::Down))) *
                   routing.weights.index({token, choice}).unsqueeze(1);
    out = out.index_add(0, token, y);
  }
  return out;
}

// The floor: each expert's three products alone on its tokens (gathered beforehand),
// what any way of running the experts must compute.
struct ExpertInputs {
  std::vector<int64_t> expert;
  std::vector<at::Tensor> inputs;
};
ExpertInputs gathered_inputs(const Layer& l, const at::Tensor& x) {
  at::NoGradGuard no_grad;
  const ModelConfig& c = l.config;
  const ExpertRouting routing = route_tokens(c, l.at(c.router_weight()), x);
  ExpertInputs g;
  for (int64_t e = 0; e < c.num_experts; ++e) {
    const at::Tensor token = (routing.experts == e).nonzero().select(1, 0);
    if (token.numel() == 0) continue;
    g.expert.push_back(e);
    g.inputs.push_back(x.index_select(0, token).contiguous());
  }
  return g;
}
void products_alone(const Layer& l, const ExpertInputs& g) {
  const ModelConfig& c = l.config;
  for (size_t i = 0; i < g.expert.size(); ++i) {
    const int64_t e = g.expert[i];
    const at::Tensor gate = at::linear(g.inputs[i], l.at(c.expert_weight(e, P::Gate)));
    const at::Tensor up = at::linear(g.inputs[i], l.at(c.expert_weight(e, P::Up)));
    at::linear(gate * up, l.at(c.expert_weight(e, P::Down)));
  }
}

// Median seconds of `repeats` runs of `f` after one warm-up.
template <typename F>
double median_seconds(int repeats, F&& f) {
  f();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = Clock::now();
    f();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(stderr, "usage: %s OUT.json TOKENS,... EXPERTS TOP_K HIDDEN WIDTH [REPEATS]\n", argv[0]);
    return 2;
  }
  const std::string out_path = argv[1];
  const std::vector<int64_t> token_counts = numbers(argv[2]);
  const int64_t experts = std::stoll(argv[3]), top_k = std::stoll(argv[4]), hidden = std::stoll(argv[5]),
                width = std::stoll(argv[6]);
  const int repeats = argc > 7 ? std::stoi(argv[7]) : 5;
  Layer layer = random_layer(experts, top_k, hidden, width);
  nlohmann::json rows = nlohmann::json::array();
  std::printf("| tokens | products alone (ms) | grouped fwd (ms) | loop fwd (ms) | loop/grouped | floor/grouped | "
              "grouped fwd+bwd (ms) | loop fwd+bwd (ms) | loop/grouped | max diff |\n"
              "|---|---|---|---|---|---|---|---|---|---|\n");
  for (int64_t tokens : token_counts) {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
    const at::Tensor x = at::randn({tokens, hidden}, gen);
    double diff = 0;
    {
      at::NoGradGuard no_grad;
      diff = (grouped(layer, x) - per_expert_loop(layer, x)).abs().max().item<double>();
    }
    auto forward = [&](auto&& f) {
      return median_seconds(repeats, [&] {
        at::NoGradGuard no_grad;
        f(layer, x);
      });
    };
    auto train = [&](auto&& f) {
      return median_seconds(repeats, [&] {
        const at::Tensor leaf = x.detach().requires_grad_(true);
        f(layer, leaf).square().sum().backward();
        for (auto& [name, w] : layer.weights) w.mutable_grad() = at::Tensor();
      });
    };
    const ExpertInputs inputs = gathered_inputs(layer, x);
    const double floor = median_seconds(repeats, [&] {
      at::NoGradGuard no_grad;
      products_alone(layer, inputs);
    });
    const double gf = forward(grouped), lf = forward(per_expert_loop);
    const double gt = train(grouped), lt = train(per_expert_loop);
    std::printf("| %lld | %.2f | %.2f | %.2f | %.2fx | %.2f | %.2f | %.2f | %.2fx | %.1e |\n",
                static_cast<long long>(tokens), floor * 1e3, gf * 1e3, lf * 1e3, lf / gf, floor / gf, gt * 1e3,
                lt * 1e3, lt / gt, diff);
    std::fflush(stdout);
    rows.push_back({{"tokens", tokens},
                    {"products_alone_s", floor},
                    {"grouped_forward_s", gf},
                    {"loop_forward_s", lf},
                    {"grouped_train_s", gt},
                    {"loop_train_s", lt},
                    {"max_abs_diff", diff}});
  }
  nlohmann::json result = {{"experts", experts},
                           {"top_k", top_k},
                           {"hidden", hidden},
                           {"width", width},
                           {"threads", at::get_num_threads()},
                           {"rows", rows}};
  std::ofstream(out_path) << result.dump(2) << "\n";
  // Different outputs would make the timing meaningless.
  for (const auto& row : rows)
    if (row["max_abs_diff"].get<double>() > 1e-4) {
      std::fprintf(stderr, "the two ways disagree by %g at %lld tokens\n", row["max_abs_diff"].get<double>(),
                   static_cast<long long>(row["tokens"].get<int64_t>()));
      return 1;
    }
  return 0;
}
