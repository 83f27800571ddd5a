// The decoder against transformers (the independent reference): logits for fixed
// tokens from tiny random Qwen2, Qwen3 and LLaMA checkpoints made by
// tests/fixtures/make_fixtures.py, the KV cache, padding, the meta-device skeleton,
// strict loading, and checkpoints that transformers loads back.
#include <cmath>
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include "catch_with_torch.h"
#include "run_python.h"
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "areal/io/checkpoint.h"
#include "areal/util/strings.h"
#include "areal/model/hf_weights.h"
#include "areal/model/fused_rotary.h"
#include "areal/model/bfloat16_linear.h"
#include "areal/model/brgemm_attention.h"
#include "areal/model/mixed_attention.h"
#include "areal/model/rms_norm.h"
#include "areal/model/swiglu.h"
#include "test_paths.h"

namespace fs = std::filesystem;
using namespace areal;
using Catch::Matchers::Contains;

namespace {

const std::string kFixtures = source_path("tests/fixtures/models");
const std::vector<std::string> kModels = {"qwen2_tied", "qwen2_untied", "qwen3",      "llama",  "llama_mha_bias",
                                          "llama31",    "qwen2_linear", "qwen2_yarn", "mistral", "gemma2",
                                          "gemma3_text", "mistral_window", "gemma3_window", "qwen2_window",
                                          "llama_dynamic", "qwen3_moe", "qwen3_moe_step", "mixtral"};

double max_diff(const at::Tensor& a, const at::Tensor& b) { return (a - b).abs().max().item<double>(); }

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("areal_model_test_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

// A copy of a fixture whose config.json text goes through `edit`.
std::string edited_copy(const TempDir& dir, const std::string& model, const std::function<std::string(std::string)>& edit) {
  fs::path out = dir.path / (model + "_edited");
  fs::remove_all(out);
  fs::copy(kFixtures + "/" + model, out);
  std::ifstream in(out / "config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(out / "config.json") << edit(text);
  return out.string();
}

// The same with one text of config.json replaced by another (every occurrence).
std::string replaced_copy(const TempDir& dir, const std::string& model, const std::string& from, const std::string& to) {
  return edited_copy(dir, model, [&](std::string t) { return std::regex_replace(t, std::regex(from), to); });
}

std::string load_error(const std::string& path) {
  try {
    load_causal_lm(path, at::kFloat);
  } catch (const io::CheckpointError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("model: logits match transformers for Qwen2, Qwen3, LLaMA, Mistral, Gemma 2/3, Qwen3-MoE and Mixtral", "[model][parity]") {
  for (const auto& name : kModels) {
    INFO(name);
    auto model = load_causal_lm(kFixtures + "/" + name, at::kFloat);
    io::SafetensorsReader reference(kFixtures + "/" + name + "/reference.safetensors");
    at::NoGradGuard no_grad;
    at::Tensor logits = model->forward(reference.read("input_ids"));
    CHECK(max_diff(logits, reference.read("logits")) < 1e-4);
  }
}

TEST_CASE("model: bfloat16 logits match transformers' bfloat16 run", "[model][parity][bf16]") {
  // Our bfloat16 forward against transformers' bfloat16 forward of the same weights. The
  // two differ by rounding order (kernels, fused ops) at the level of bfloat16's own
  // error, so the checks are: within bfloat16's error of each other (relative to the
  // logits' scale, 2^-6 for 8 significant bits over a few layers), and as close to the
  // float32 logits as transformers' bfloat16 is (a wrong cast, say a norm weighted in
  // bfloat16 or rotary tables rounded early, moves them further).
  for (const auto& name : kModels) {
    INFO(name);
    auto model = load_causal_lm(kFixtures + "/" + name, at::kBFloat16);
    io::SafetensorsReader reference(kFixtures + "/" + name + "/reference.safetensors");
    at::NoGradGuard no_grad;
    at::Tensor logits = model->forward(reference.read("input_ids")).to(at::kFloat);
    const at::Tensor want = reference.read("logits_bf16"), fp32 = reference.read("logits");
    const double scale = want.abs().max().item<double>();
    const double ours_vs_theirs = max_diff(logits, want), ours_vs_fp32 = max_diff(logits, fp32);
    const double theirs_vs_fp32 = max_diff(want, fp32);
    const double ours_mean = (logits - fp32).abs().mean().item<double>();
    const double theirs_mean = (want - fp32).abs().mean().item<double>();
    // A max difference moves in whole bfloat16 steps of the largest logits: on another
    // CPU transformers' own bf16 logits of Mixtral's fixture differ from the file's by
    // one step (0.0034 of 0.89), so the max gets one step of slack and the mean (which a
    // wrong cast moves as well, without the steps) the tight bound.
    const double step = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(scale))) - 7);
    INFO("max |logit| " << scale << "; ours vs transformers' bf16 " << ours_vs_theirs << "; vs fp32: ours "
                        << ours_vs_fp32 << ", transformers' " << theirs_vs_fp32 << " (mean " << ours_mean << ", "
                        << theirs_mean << ")");
    CHECK(ours_vs_theirs < scale / 64);
    CHECK(ours_vs_fp32 < 1.5 * theirs_vs_fp32 + step);
    CHECK(ours_mean < 1.25 * theirs_mean);
  }
}

// The routers' load-balancing loss against transformers' load_balancing_loss_func: its
// value (float32, with padding, bfloat16) and its gradient with respect to each router.
TEST_CASE("model: the load-balancing loss and its router gradients match transformers", "[model][parity][moe]") {
  for (const auto& name : {"qwen3_moe", "qwen3_moe_step", "mixtral"}) {
    INFO(name);
    io::SafetensorsReader reference(kFixtures + "/" + name + "/reference.safetensors");
    const at::Tensor ids = reference.read("input_ids");
    auto model = load_causal_lm(kFixtures + "/" + name, at::kFloat);
    const ModelConfig& c = model->config();
    std::vector<at::Tensor> routers;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      if (c.layer_is_sparse(l))
        routers.push_back(model->named_parameters()[cat("model.layers.", l, ".", c.router_weight())].requires_grad_(true));
    std::vector<RouterTally> tallies;
    model->forward(ids, {}, nullptr, &tallies);
    REQUIRE(tallies.size() == routers.size());
    at::Tensor aux = load_balancing_loss(c, tallies);
    CHECK(std::abs(aux.item<double>() - reference.read("aux_loss").item<double>()) < 1e-5);
    aux.backward();
    std::vector<at::Tensor> grads;
    for (const at::Tensor& router : routers) grads.push_back(router.grad());
    const at::Tensor want_grads = reference.read("aux_router_grads");
    CHECK(max_diff(at::stack(grads), want_grads) < 1e-5 * std::max(1.0, want_grads.abs().max().item<double>()));

    at::NoGradGuard no_grad;
    tallies.clear();  // padding counts for nothing
    model->forward(ids, reference.read("aux_mask"), nullptr, &tallies);
    CHECK(std::abs(load_balancing_loss(c, tallies).item<double>() - reference.read("aux_loss_masked").item<double>()) <
          1e-5);
    auto bf16 = load_causal_lm(kFixtures + "/" + name, at::kBFloat16);
    tallies.clear();
    bf16->forward(ids, {}, nullptr, &tallies);
    const double ours = load_balancing_loss(c, tallies).item<double>();
    const double theirs = reference.read("aux_loss_bf16").item<double>(), fp32 = reference.read("aux_loss").item<double>();
    INFO("bf16 aux: ours " << ours << ", transformers' " << theirs << ", fp32 " << fp32);
    CHECK(std::abs(ours - theirs) < 1e-2 * fp32);
  }
}

// Routing replay: a sparse layer given experts per token runs those (rows of -1: the
// router's own), weighted by the router's probabilities at them, against a loop over
// tokens and experts written here; the router's own top-k comes back either way, and
// replaying a forward's own choices gives its logits bit for bit.
TEST_CASE("model: replayed experts replace the router's, against a loop over tokens", "[model][moe]") {
  at::NoGradGuard no_grad;
  for (const auto& name : {"qwen3_moe", "mixtral"}) {
    INFO(name);
    auto model = load_causal_lm(kFixtures + "/" + name, at::kFloat);
    const ModelConfig& c = model->config();
    const int64_t k = c.num_experts_per_tok, tokens = 7;
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const at::Tensor x = at::randn({1, tokens, c.hidden_size}, gen);
    int64_t layer = 0;
    while (!c.layer_is_sparse(layer)) ++layer;
    const auto params = model->named_parameters();
    auto w = [&](const std::string& inside) {
      const auto* p = params.find(cat("model.layers.", layer, ".", inside));
      return p ? *p : at::Tensor();
    };
    auto linear = [&](const at::Tensor& in, const std::string& n) { return at::linear(in, w(n + ".weight")); };
    // Distinct experts for every token; rows 1 and 4 keep their own.
    at::Tensor replay = at::rand({tokens, c.num_experts}, gen).argsort(/*dim=*/int64_t{1}).narrow(1, 0, k).contiguous();
    replay[1].fill_(-1);
    replay[4].fill_(-1);
    ExpertChoices choices{replay, {}};
    const at::Tensor out = expert_mixture(c, w, x, linear, nullptr, {}, &choices);

    const at::Tensor flat = x.view({tokens, c.hidden_size});
    const at::Tensor probs = at::softmax(at::linear(flat, w(c.router_weight())), -1);
    CHECK(at::equal(choices.chosen, std::get<1>(probs.topk(k, -1))));
    using P = ModelConfig::ExpertProjection;
    auto expert = [&](int64_t e, P p) { return w(c.expert_weight(e, p)); };
    for (int64_t t = 0; t < tokens; ++t) {
      INFO("token " << t);
      at::Tensor experts = replay[t][0].item<int64_t>() >= 0 ? replay[t] : choices.chosen[t];
      at::Tensor weights = probs[t].index_select(0, experts);
      if (c.norm_topk_prob) weights = weights / weights.sum();
      at::Tensor want = at::zeros({c.hidden_size});
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = experts[j].item<int64_t>();
        const at::Tensor h = at::silu(at::mv(expert(e, P::Gate), flat[t])) * at::mv(expert(e, P::Up), flat[t]);
        want += weights[j] * at::mv(expert(e, P::Down), h);
      }
      CHECK(max_diff(out[0][t], want) < 1e-5);
    }

    const at::Tensor ids = io::SafetensorsReader(kFixtures + "/" + name + "/reference.safetensors").read("input_ids");
    std::vector<ExpertChoices> own;
    const at::Tensor logits = model->forward(ids, {}, nullptr, nullptr, &own);
    REQUIRE(static_cast<int64_t>(own.size()) == c.sparse_layer_count());
    std::vector<ExpertChoices> again;
    for (const ExpertChoices& o : own) again.push_back({o.chosen, {}});
    CHECK(at::equal(model->forward(ids, {}, nullptr, nullptr, &again), logits));
  }
}

TEST_CASE("model: rope scaling written with the older rope_scaling/type keys gives the same logits", "[model][parity]") {
  // transformers before version 5 wrote {"rope_scaling": {"type": "linear", ...}} beside
  // rope_theta; the same model must come out.
  TempDir dir;
  at::NoGradGuard no_grad;
  const std::string old_keys = edited_copy(dir, "qwen2_linear", [](std::string t) {
    t = std::regex_replace(t, std::regex("\"rope_parameters\""), "\"rope_scaling\"");
    t = std::regex_replace(t, std::regex("\"rope_type\": \"linear\""), "\"type\": \"linear\"");
    t = std::regex_replace(t, std::regex("\"rope_theta\": 10000.0,"), "");  // top level in those files
    return std::regex_replace(t, std::regex("\"rms_norm_eps\""), "\"rope_theta\": 10000.0, \"rms_norm_eps\"");
  });
  ModelConfig config = ModelConfig::from_file(old_keys + "/config.json");
  CHECK(config.rope_scaling.type == "linear");
  CHECK(config.rope_scaling.factor == 2.0);
  auto model = load_causal_lm(old_keys, at::kFloat);
  io::SafetensorsReader reference(kFixtures + "/qwen2_linear/reference.safetensors");
  CHECK(max_diff(model->forward(reference.read("input_ids")), reference.read("logits")) < 1e-4);
}

TEST_CASE("model: prefill then one token at a time gives the full forward's logits", "[model][cache]") {
  at::NoGradGuard no_grad;
  // The rope-scaled ones decode past their original_max_position_embeddings.
  for (const auto& name : {"qwen2_untied", "qwen3", "llama", "llama31", "qwen2_yarn", "mistral", "gemma2", "gemma3_text",
                           "mistral_window", "gemma3_window", "qwen2_window", "qwen3_moe", "mixtral"}) {
    INFO(name);
    auto model = load_causal_lm(kFixtures + "/" + name, at::kFloat);
    at::Tensor ids = io::SafetensorsReader(kFixtures + "/" + name + "/reference.safetensors").read("input_ids");
    at::Tensor full = model->forward(ids);
    KVCache cache;
    std::vector<at::Tensor> steps = {model->forward(ids.narrow(1, 0, 5), {}, &cache)};
    for (int64_t t = 5; t < ids.size(1); ++t) steps.push_back(model->forward(ids.narrow(1, t, 1), {}, &cache));
    CHECK(cache.length() == ids.size(1));
    CHECK(max_diff(at::cat(steps, 1), full) < 1e-5);
  }
}

// transformers' eager RMSNorm (LlamaRMSNorm, and Gemma's with the 1 + w scale in float32).
at::Tensor eager_rms_norm(const at::Tensor& x, const at::Tensor& w, double eps, bool gemma) {
  const at::Tensor x32 = x.to(at::kFloat);
  const at::Tensor normed = x32 * at::rsqrt(x32.pow(2).mean(-1, true) + eps);
  if (gemma) return (normed * (1.0 + w.to(at::kFloat))).to(x.scalar_type());
  return w * normed.to(x.scalar_type());
}

TEST_CASE("model: the fused RMSNorm gives the eager ops' values and gradients", "[model][norm]") {
  // 40 columns: two 16-lane blocks and a tail; 3,000 rows: several threads' weight sums.
  at::manual_seed(7);
  for (const bool gemma : {false, true}) {
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      INFO((gemma ? "gemma " : "llama ") << dtype);
      const at::Tensor x0 = at::randn({3, 1000, 40}, at::kDouble) * 3, w0 = at::randn({40}, at::kDouble);
      const at::Tensor dy = at::randn({3, 1000, 40}, at::kDouble);
      auto run = [&](bool fused, at::ScalarType type) {
        at::Tensor x = x0.to(type).requires_grad_(), w = w0.to(type).requires_grad_();
        REQUIRE(fuses_rms_norm(x, w) == (type != at::kDouble));
        at::Tensor y = fused ? fused_rms_norm(x, w, 1e-6, gemma) : eager_rms_norm(x, w, 1e-6, gemma);
        y.backward(dy.to(type));
        return std::vector<at::Tensor>{y.to(at::kDouble), x.grad().to(at::kDouble), w.grad().to(at::kDouble)};
      };
      const auto got = run(true, dtype), eager = run(false, dtype), exact = run(false, at::kDouble);
      for (int i = 0; i < 3; ++i) {
        INFO("output " << i);
        const double scale = exact[i].abs().max().item<double>();
        // float32: the exact values to float32 rounding; bfloat16: no further from the exact
        // ones than the eager ops in bfloat16 are (plus one rounding step).
        const double eager_error = (eager[i] - exact[i]).abs().max().item<double>() / scale;
        const double bound = dtype == at::kFloat ? 2e-5 : eager_error + 1.0 / 128;
        CHECK((got[i] - exact[i]).abs().max().item<double>() / scale < bound);
        if (dtype == at::kBFloat16 && i == 0)  // the same roundings as the eager ops: nearly every value equal
          CHECK((got[i] != eager[i]).to(at::kDouble).mean().item<double>() < 0.01);
      }
    }
  }
}

TEST_CASE("model: bfloat16 attention of short rows is as close to float64 as torch's bfloat16 SDPA", "[model][norm]") {
  // The packed training rows' shape: 10 query heads on 2 key/value heads, causal, 94
  // tokens; and one of 4 heads on 4, 37 tokens of 128 dimensions. Scores scaled up (x3)
  // so that some rows are peaked. Both kernels: torch's flash forward with a float32
  // backward (mixed_attention.h) and the one on the matrix units (brgemm_attention.h).
  struct Shape { int64_t batch, heads, kv_heads, tokens, dim; };
  for (const Shape s : {Shape{4, 10, 2, 94, 64}, Shape{2, 4, 4, 37, 128}}) {
    at::manual_seed(11);
    const at::Tensor q0 = at::randn({s.batch, s.heads, s.tokens, s.dim}, at::kDouble) * 3;
    const at::Tensor k0 = at::randn({s.batch, s.kv_heads, s.tokens, s.dim}, at::kDouble);
    const at::Tensor v0 = at::randn({s.batch, s.kv_heads, s.tokens, s.dim}, at::kDouble);
    const at::Tensor dy = at::randn({s.batch, s.heads, s.tokens, s.dim}, at::kDouble);
    enum Kernel { kMixed, kBrgemm, kSdpa };
    auto run = [&](Kernel kernel, at::ScalarType type) {
      auto leaf = [&](const at::Tensor& x) { return x.to(type, false, /*copy=*/true).requires_grad_(); };
      at::Tensor q = leaf(q0), k = leaf(k0), v = leaf(v0);
      at::Tensor y = kernel == kMixed    ? mixed_precision_attention(q, k, v, std::nullopt)
                     : kernel == kBrgemm ? brgemm_attention(q, k, v, std::nullopt)
                                         : at::scaled_dot_product_attention(q, k, v, {}, 0.0, true, std::nullopt,
                                                                            /*enable_gqa=*/s.heads != s.kv_heads);
      y.backward(dy.to(type));
      return std::vector<at::Tensor>{y.to(at::kDouble), q.grad().to(at::kDouble), k.grad().to(at::kDouble),
                                     v.grad().to(at::kDouble)};
    };
    const auto sdpa = run(kSdpa, at::kBFloat16), exact = run(kSdpa, at::kDouble);
    const bool matrix_units = brgemm_attention_runs(q0.to(at::kBFloat16), k0.to(at::kBFloat16), v0.to(at::kBFloat16));
    if (!matrix_units) WARN("this CPU's brgemm does not pack bfloat16: brgemm_attention not run");
    for (const Kernel kernel : {kMixed, kBrgemm}) {
      if (kernel == kBrgemm && !matrix_units) continue;
      const auto got = run(kernel, at::kBFloat16);
      for (int i = 0; i < 4; ++i) {
        INFO(s.heads << "/" << s.kv_heads << " heads, " << s.tokens << " tokens, " << s.dim << " dims; "
                     << (kernel == kMixed ? "mixed" : "brgemm") << " kernel, output " << i
                     << " (0: attention, 1-3: gradients of q, k, v)");
        auto error = [&](const at::Tensor& t) { return ((t - exact[i]).norm() / exact[i].norm()).item<double>(); };
        CHECK(error(got[i]) < 1e-2);
        CHECK(error(got[i]) <= error(sdpa[i]) * 1.05);
      }
    }
  }
}

TEST_CASE("model: the bfloat16 linear layer gives at::linear's values and gradients", "[model][norm]") {
  // Tokens and widths that are not multiples of the transposes' 16 x 16 tiles, and full
  // tiles; with and without a bias; a frozen weight gets no gradient.
  at::manual_seed(3);
  for (const auto& [tokens, in_features, out_features] : std::vector<std::array<int64_t, 3>>{{37, 24, 40}, {96, 64, 48}}) {
    for (const bool with_bias : {true, false}) {
      INFO(tokens << " tokens, " << in_features << " -> " << out_features << (with_bias ? ", bias" : ""));
      const at::Tensor x0 = at::randn({2, tokens, in_features}, at::kDouble), w0 = at::randn({out_features, in_features}, at::kDouble);
      const at::Tensor b0 = at::randn({out_features}, at::kDouble), dy = at::randn({2, tokens, out_features}, at::kDouble);
      auto run = [&](bool ours, at::ScalarType type) {
        auto leaf = [&](const at::Tensor& t) { return t.to(type, false, /*copy=*/true).requires_grad_(); };
        at::Tensor x = leaf(x0), w = leaf(w0), b = with_bias ? leaf(b0) : at::Tensor();
        REQUIRE(bfloat16_linear_applies(x, w) == (type == at::kBFloat16));
        at::Tensor y = ours ? bfloat16_linear(x, w, b) : at::linear(x, w, b.defined() ? std::optional<at::Tensor>(b) : std::nullopt);
        y.backward(dy.to(type));
        std::vector<at::Tensor> out{y, x.grad(), w.grad()};
        if (with_bias) out.push_back(b.grad());
        for (auto& t : out) t = t.to(at::kDouble);
        return out;
      };
      const auto got = run(true, at::kBFloat16), aten = run(false, at::kBFloat16), exact = run(false, at::kDouble);
      CHECK(at::equal(got[0], aten[0]));  // the forward is at::linear's
      for (size_t i = 1; i < got.size(); ++i) {
        INFO("gradient " << i << " (1: input, 2: weight, 3: bias)");
        auto error = [&](const at::Tensor& t) { return ((t - exact[i]).norm() / exact[i].norm()).item<double>(); };
        CHECK(error(got[i]) < 1e-2);
        CHECK(error(got[i]) <= error(aten[i]) * 1.05 + 1e-4);
      }
    }
  }
  // A frozen weight (LoRA's base): at::linear's own product, no weight gradient.
  const at::Tensor frozen = at::randn({8, 16}).to(at::kBFloat16);
  CHECK_FALSE(bfloat16_linear_applies(at::randn({4, 16}).to(at::kBFloat16).requires_grad_(), frozen));
}

TEST_CASE("model: generation's fused SwiGLU gives the eager ops' values", "[model][norm]") {
  // Rows of a fused gate/up product, 2 x 100 values (not a multiple of the 16 lanes), as
  // a decode step holds them; wide enough (x4) that silu saturates both ways.
  at::manual_seed(7);
  const at::Tensor both0 = at::randn({5, 1, 200}, at::kDouble) * 4;
  const at::Tensor exact = at::silu(both0.narrow(-1, 0, 100)) * both0.narrow(-1, 100, 100);
  for (const auto dtype : {at::kFloat, at::kBFloat16}) {
    INFO(dtype);
    at::NoGradGuard no_grad;
    const at::Tensor both = both0.to(dtype);
    REQUIRE(fuses_swiglu(both));
    const at::Tensor got = swiglu(both).to(at::kDouble);
    const at::Tensor eager = (at::silu(both.narrow(-1, 0, 100)) * both.narrow(-1, 100, 100)).to(at::kDouble);
    REQUIRE(got.sizes() == exact.sizes());
    const double scale = exact.abs().max().item<double>();
    if (dtype == at::kFloat) {
      CHECK((got - exact).abs().max().item<double>() / scale < 1e-6);
    } else {  // the eager ops' two roundings: equal but where e^x's last bits tip one (one bfloat16 step)
      CHECK((got - eager).abs().le(eager.abs() * (1.0 / 128) + 1e-30).all().item<bool>());
      CHECK((got != eager).sum().item<int64_t>() <= 5);
      CHECK((got - exact).norm().item<double>() <= (eager - exact).norm().item<double>() * 1.05);
    }
  }
  CHECK_FALSE(fuses_swiglu(both0.to(at::kFloat)));  // gradients recorded: training keeps the autograd ops
}

TEST_CASE("model: the fused rotary embedding gives the eager ops' values and gradients", "[model][norm]") {
  // Queries as the layers hold them: [B, T, heads, D] memory seen as [B, heads, T, D];
  // cos and sin per row (padded batches) and one row for all (packed rows).
  at::manual_seed(5);
  for (const int64_t table_rows : {3, 1}) {
    for (const auto dtype : {at::kFloat, at::kBFloat16}) {
      INFO(table_rows << " table rows, " << dtype);
      const at::Tensor x0 = at::randn({3, 50, 5, 72}, at::kDouble) * 2, dy = at::randn({3, 5, 50, 72}, at::kDouble);
      // Halves of different angles (real tables repeat them): each value's own cos and sin.
      const at::Tensor angle = at::randn({table_rows, 50, 72}, at::kDouble) * 3;
      const at::Tensor cos0 = angle.cos(), sin0 = angle.sin();
      auto run = [&](bool fused, at::ScalarType type) {
        at::Tensor leaf = x0.to(type, false, /*copy=*/true).requires_grad_();
        const at::Tensor x = leaf.transpose(1, 2), cos = cos0.to(type), sin = sin0.to(type);
        REQUIRE(fuses_rotary(x, cos, sin) == (type != at::kDouble));
        at::Tensor y;
        if (fused) {
          y = fused_rotary(x, cos, sin);
        } else {  // transformers' apply_rotary_pos_emb
          const at::Tensor rotated = at::cat({-x.narrow(-1, 36, 36), x.narrow(-1, 0, 36)}, -1);
          y = x * cos.unsqueeze(1) + rotated * sin.unsqueeze(1);
        }
        y.backward(dy.to(type));
        return std::vector<at::Tensor>{y.to(at::kDouble), leaf.grad().to(at::kDouble)};
      };
      const auto got = run(true, dtype), eager = run(false, dtype), exact = run(false, at::kDouble);
      for (int i = 0; i < 2; ++i) {
        INFO("output " << i);
        const double scale = exact[i].abs().max().item<double>();
        const double bound = dtype == at::kFloat ? 1e-6 : (eager[i] - exact[i]).abs().max().item<double>() / scale + 1e-3;
        CHECK((got[i] - exact[i]).abs().max().item<double>() / scale < bound);
        if (dtype == at::kBFloat16)  // the same roundings as the eager ops: every value equal
          CHECK(at::equal(got[i], eager[i]));
      }
    }
  }
}

TEST_CASE("model: a left-padded sequence gives the logits of the unpadded one", "[model][padding]") {
  at::NoGradGuard no_grad;
  auto model = load_causal_lm(kFixtures + "/qwen2_tied", at::kFloat);
  at::Tensor ids = io::SafetensorsReader(kFixtures + "/qwen2_tied/reference.safetensors").read("input_ids");
  at::Tensor short_ids = ids.narrow(0, 1, 1).narrow(1, 0, 6);  // 6 tokens
  at::Tensor batch = ids.clone();                              // row 1: 3 pads, then the 6 tokens
  batch.narrow(0, 1, 1).narrow(1, 3, 6).copy_(short_ids);
  at::Tensor mask = at::ones({2, 9}, at::kLong);
  mask.narrow(0, 1, 1).narrow(1, 0, 3).zero_();
  at::Tensor padded = model->forward(batch, mask);
  CHECK_FALSE(padded.isnan().any().item<bool>());
  CHECK(max_diff(padded.narrow(0, 1, 1).narrow(1, 3, 6), model->forward(short_ids)) < 1e-5);
  CHECK(max_diff(padded.narrow(0, 0, 1), model->forward(ids.narrow(0, 0, 1))) < 1e-5);  // row 0 unaffected
  // Generation over the padded batch with the cache continues both rows correctly.
  KVCache cache;
  model->forward(batch, mask, &cache);
  at::Tensor next = at::tensor({5, 11}, at::kLong).view({2, 1});
  at::Tensor step = model->forward(next, at::ones({2, 1}, at::kLong), &cache);
  at::Tensor unpadded = model->forward(at::cat({short_ids, next.narrow(0, 1, 1)}, 1));
  CHECK(max_diff(step.narrow(0, 1, 1), unpadded.narrow(1, 6, 1)) < 1e-5);
}

TEST_CASE("model: the meta-device skeleton has every name and shape and no storage", "[model][meta]") {
  for (const auto& name : kModels) {
    INFO(name);
    ModelConfig config = ModelConfig::from_file(kFixtures + "/" + name + "/config.json");
    CausalLM skeleton(config, at::TensorOptions().device(at::kMeta));
    auto real = load_causal_lm(kFixtures + "/" + name, at::kFloat);
    auto meta_params = skeleton.named_parameters();
    auto real_params = real->named_parameters();
    REQUIRE(meta_params.size() == real_params.size());
    int64_t count = 0;
    for (size_t i = 0; i < meta_params.size(); ++i) {
      CHECK(meta_params[i].key() == real_params[i].key());
      CHECK(meta_params[i].value().sizes() == real_params[i].value().sizes());
      CHECK(meta_params[i].value().is_meta());
      count += meta_params[i].value().numel();
    }
    CHECK(count == config.num_parameters());
    // Every checkpoint tensor is a parameter (lm_head is absent when tied).
    io::CheckpointReader checkpoint(kFixtures + "/" + name);
    CHECK(checkpoint.names().size() == meta_params.size());
  }
}

TEST_CASE("model: strict loading names the tensor and file", "[model][errors]") {
  TempDir dir;
  SECTION("shape disagreeing with config.json") {
    std::string path = replaced_copy(dir, "llama", "\"intermediate_size\": 48", "\"intermediate_size\": 40");
    CHECK_THAT(load_error(path), Contains("model.layers.0.mlp.gate_proj.weight") && Contains("[48, 32]") &&
                                     Contains("config.json implies [40, 32]") && Contains("model.safetensors"));
  }
  SECTION("a missing and an unexpected tensor") {
    // Tied config over an untied checkpoint: lm_head.weight is then fine; untied over tied: missing.
    std::string untied = replaced_copy(dir, "qwen2_tied", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false");
    CHECK_THAT(load_error(untied), Contains("no tensor 'lm_head.weight'"));
    std::string qwen3_as_qwen2 = replaced_copy(dir, "qwen3", "\"model_type\": \"qwen3\"", "\"model_type\": \"qwen2\"");
    std::string e = load_error(qwen3_as_qwen2);
    CHECK_THAT(e, Contains("q_proj.bias"));  // qwen2 expects q/k/v biases the qwen3 checkpoint lacks
  }
  SECTION("unexpected tensor") {
    // LLaMA without attention_bias over a checkpoint that has the biases: every
    // parameter is found, then the biases are left over.
    std::string no_bias = replaced_copy(dir, "llama_mha_bias", "\"attention_bias\": true", "\"attention_bias\": false");
    CHECK_THAT(load_error(no_bias), Contains("model.safetensors") && Contains("unexpected tensor") &&
                                        Contains("_proj.bias'"));
  }
  SECTION("a mixture of experts: a missing expert, too many experts per token, jitter") {
    TempDir moe_dir;
    const fs::path copy = moe_dir.path / "qwen3_moe_missing";
    fs::copy(kFixtures + "/qwen3_moe", copy);
    {  // the checkpoint without expert 3's down projection
      io::SafetensorsReader full(kFixtures + "/qwen3_moe/model.safetensors");
      std::vector<std::pair<std::string, at::Tensor>> kept;
      for (const auto& t : full.tensors())
        if (t.name != "model.layers.0.mlp.experts.3.down_proj.weight") kept.push_back({t.name, full.read(t.name)});
      io::write_safetensors((copy / "model.safetensors").string(), kept);
    }
    CHECK_THAT(load_error(copy.string()),
               Contains("no tensor 'model.layers.0.mlp.experts.3.down_proj.weight'") && Contains("qwen3_moe"));
    CHECK_THAT(load_error(replaced_copy(dir, "qwen3_moe", "\"num_experts_per_tok\": 2", "\"num_experts_per_tok\": 5")),
               Contains("num_experts_per_tok (5) is more than the 4 experts"));
    CHECK_THAT(load_error(replaced_copy(dir, "mixtral", "\"router_jitter_noise\": 0.0", "\"router_jitter_noise\": 0.1")),
               Contains("router_jitter_noise other than 0 is not supported"));
    // The Hub's own key (Qwen3-30B-A3B's config.json says num_experts) reads the same.
    const std::string hub_key = replaced_copy(dir, "qwen3_moe", "\"num_local_experts\"", "\"num_experts\"");
    CHECK(ModelConfig::from_file(hub_key + "/config.json").num_experts == 4);
    CHECK(load_error(hub_key).empty());
  }
  SECTION("unsupported architectures and options are refused by name") {
    CHECK_THAT(load_error(replaced_copy(dir, "llama", "\"model_type\": \"llama\"", "\"model_type\": \"gpt2\"")),
               Contains("model_type 'gpt2' is not supported"));
    CHECK_THAT(load_error(replaced_copy(dir, "llama", "\"rope_type\": \"default\"", "\"rope_type\": \"longrope\"")),
               Contains("rope type 'longrope' is not supported (default, linear, llama3, yarn, dynamic)"));
    CHECK_THAT(load_error(replaced_copy(dir, "llama", "\"mlp_bias\": false", "\"mlp_bias\": true")),
               Contains("mlp_bias=true is not supported"));
    // Mixture-of-experts and vision-language families, named as such.
    for (const auto& [type, hint] : std::vector<std::pair<std::string, std::string>>{
             {"qwen2_moe", "of the mixture-of-experts families only qwen3_moe and mixtral are supported"},
             {"deepseek_v3", "of the mixture-of-experts families only qwen3_moe and mixtral are supported"},
             {"qwen2_5_vl", "vision-language models are not supported"},
             {"gemma3", "for Gemma 3's text model: gemma3_text"}}) {
      CHECK_THAT(load_error(replaced_copy(dir, "llama", "\"model_type\": \"llama\"", "\"model_type\": \"" + type + "\"")),
                 Contains("model_type '" + type + "' is not supported") && Contains(hint));
    }
  }
}

TEST_CASE("model: a checkpoint written by areal-train loads in transformers with the same logits",
          "[model][python]") {
  TempDir dir;
  at::NoGradGuard no_grad;
  std::string pairs;  // checkpoint and expected logits of each family: one start of Python for all
  // qwen3_moe, mixtral: the Hub's one tensor per expert, which transformers 5 fuses on load.
  for (const auto& name : {"qwen2_tied", "qwen3", "llama", "qwen3_moe", "mixtral"}) {
    INFO(name);
    auto model = load_causal_lm(kFixtures + "/" + name, at::kFloat);
    for (auto& p : model->parameters()) p.mul_(0.9).add_(0.01);  // weights transformers has never seen
    at::Tensor ids = io::SafetensorsReader(kFixtures + "/" + name + "/reference.safetensors").read("input_ids");
    at::Tensor logits = model->forward(ids);
    const std::string out = (dir.path / name).string();
    save_hf_checkpoint(*model, out, /*max_shard_bytes=*/40000);  // several shards and an index
    CHECK(fs::exists(fs::path(out) / "model.safetensors.index.json"));
    io::write_safetensors((dir.path / (std::string(name) + "_expected.safetensors")).string(),
                          {{"input_ids", ids}, {"logits", logits}});
    // Our own reader agrees first ...
    CHECK(max_diff(load_causal_lm(out, at::kFloat)->forward(ids), logits) == 0);
    pairs += " " + out + " " + (dir.path / (std::string(name) + "_expected.safetensors")).string();
  }
  // ... then transformers, on every family (it prints each one's difference).
  PythonResult python = run_python("check_hf_load.py" + pairs);
  INFO(python.output);
  CHECK(python.exit_code == 0);
  for (const char* loaded : {"Qwen2ForCausalLM", "Qwen3ForCausalLM", "LlamaForCausalLM", "Qwen3MoeForCausalLM",
                             "MixtralForCausalLM"})
    CHECK_THAT(python.output, Catch::Matchers::Contains(loaded));
}
