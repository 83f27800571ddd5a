// Generation with the KV cache against the full forward without a cache (the
// step-by-step argmax), sampling controls, stop tokens, stop strings and per-row seeds.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <set>
#include <tuple>
#include "catch_with_torch.h"

#include "areal/model/hf_weights.h"
#include "areal/rollout/generation.h"
#include "areal/rollout/sampling.h"
#include "areal/text/stop_strings.h"
#include "areal/text/tokenizer.h"
#include "test_paths.h"

using namespace areal;

namespace {

const std::string kModel = source_path("tests/fixtures/models/qwen2_untied");

// Greedy continuation by re-running the whole sequence each step: no cache, no padding.
std::vector<int64_t> reference_greedy(CausalLM& model, std::vector<int64_t> ids, int64_t steps,
                                      std::vector<float>* logprobs) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t s = 0; s < steps; ++s) {
    at::Tensor logits = model.forward(at::tensor(ids, at::kLong).unsqueeze(0)).select(1, -1)[0];
    const int64_t next = logits.argmax().item<int64_t>();
    if (logprobs) logprobs->push_back(logits.log_softmax(-1)[next].item<float>());
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

std::vector<std::vector<int64_t>> prompts() { return {{5, 17, 3}, {40, 2, 9, 11, 23, 7}, {88}}; }

// Greedy decoding of up to `max_new_tokens` (the stop tests' free run and their runs).
SamplingParams greedy(int64_t max_new_tokens) {
  SamplingParams p;
  p.greedy = true;
  p.max_new_tokens = max_new_tokens;
  return p;
}

}  // namespace

TEST_CASE("generation: greedy with the cache equals step-by-step argmax of the full forward", "[rl][generation]") {
  // The paged prefill and decode (generation) against the model's own full forward:
  // also for Gemma 2's soft-capped attention and sliding windows of 4 tokens (the
  // prompts and answers outgrow them), whose forward matches transformers (test_model).
  for (const std::string& path : {kModel, source_path("tests/fixtures/models/gemma2"),
                                  source_path("tests/fixtures/models/mistral_window"),
                                  source_path("tests/fixtures/models/gemma3_window")}) {
  INFO(path);
  auto model = load_causal_lm(path, at::kFloat);
  SamplingParams p;
  p.greedy = true;
  p.max_new_tokens = 8;
  p.pad_id = 0;
  std::vector<at::Generator> none;
  std::vector<Generated> out = generate(*model, prompts(), p, none);  // left-padded batch of 3 lengths
  for (size_t r = 0; r < prompts().size(); ++r) {
    std::vector<float> logprobs;
    CHECK(out[r].tokens == reference_greedy(*model, prompts()[r], 8, &logprobs));
    REQUIRE(out[r].logprobs.size() == logprobs.size());
    for (size_t k = 0; k < logprobs.size(); ++k) CHECK(out[r].logprobs[k] == Approx(logprobs[k]).margin(1e-4));
    CHECK(out[r].truncated);
  }
  }
}

TEST_CASE("generation: a stop token ends one row and the others go on", "[rl][generation]") {
  auto model = load_causal_lm(kModel, at::kFloat);
  SamplingParams p = greedy(8);
  std::vector<at::Generator> none;
  std::vector<Generated> free_run = generate(*model, prompts(), p, none);
  p.stop_ids = {free_run[1].tokens[2]};  // row 1's third token becomes a stop token
  std::vector<Generated> out = generate(*model, prompts(), p, none);
  const auto first_stop = [&](const std::vector<int64_t>& tokens) {
    auto it = std::find(tokens.begin(), tokens.end(), p.stop_ids[0]);
    return it == tokens.end() ? tokens.size() : static_cast<size_t>(it - tokens.begin()) + 1;
  };
  for (size_t r = 0; r < out.size(); ++r) {
    const size_t n = first_stop(free_run[r].tokens);
    CHECK(out[r].tokens == std::vector<int64_t>(free_run[r].tokens.begin(), free_run[r].tokens.begin() + n));
    CHECK(out[r].truncated == (n == free_run[r].tokens.size() && out[r].tokens.back() != p.stop_ids[0]));
  }
  CHECK(out[1].tokens.size() <= 3);
  CHECK_FALSE(out[1].truncated);
  // min_new_tokens holds the stop token back.
  p.min_new_tokens = 8;
  std::vector<Generated> held = generate(*model, prompts(), p, none);
  for (const auto& g : held) CHECK(g.tokens.size() == 8);
}

TEST_CASE("generation: sampling is seeded per row, top_k 1 is greedy, top_p keeps the likeliest", "[rl][generation]") {
  auto model = load_causal_lm(kModel, at::kFloat);
  SamplingParams p;
  p.max_new_tokens = 6;
  p.temperature = 1.5;
  auto gens = [](int64_t seed, size_t n) {
    std::vector<at::Generator> g;
    for (size_t r = 0; r < n; ++r) g.push_back(answer_generator(seed, 0, static_cast<int64_t>(r), 0));
    return g;
  };
  auto g1 = gens(3, 3), g2 = gens(3, 3), g3 = gens(4, 3);
  std::vector<Generated> a = generate(*model, prompts(), p, g1), b = generate(*model, prompts(), p, g2);
  std::vector<Generated> c = generate(*model, prompts(), p, g3);
  bool any_differs = false;
  for (size_t r = 0; r < a.size(); ++r) {
    CHECK(a[r].tokens == b[r].tokens);
    any_differs = any_differs || a[r].tokens != c[r].tokens;
  }
  CHECK(any_differs);
  // A row alone gives the same answer as inside the batch: its seed, not its neighbours, decides.
  std::vector<at::Generator> alone = {answer_generator(3, 0, 1, 0)};
  CHECK(generate(*model, {prompts()[1]}, p, alone)[0].tokens == a[1].tokens);
  // The behaviour log-prob is that of the temperature-scaled distribution.
  {
    at::NoGradGuard no_grad;
    std::vector<int64_t> seq = prompts()[0];
    at::Tensor logits = model->forward(at::tensor(seq, at::kLong).unsqueeze(0)).select(1, -1)[0];
    CHECK(a[0].logprobs[0] == Approx((logits / 1.5).log_softmax(-1)[a[0].tokens[0]].item<float>()).margin(1e-4));
  }
  // top_k = 1 and a tiny top_p both leave only the most likely token.
  SamplingParams greedy = p;
  greedy.greedy = true;
  std::vector<at::Generator> none;
  std::vector<Generated> expected = generate(*model, prompts(), greedy, none);
  SamplingParams k1 = p, p0 = p;
  k1.top_k = 1;
  p0.top_p = 1e-6;
  auto g4 = gens(9, 3), g5 = gens(9, 3);
  std::vector<Generated> by_k = generate(*model, prompts(), k1, g4), by_p = generate(*model, prompts(), p0, g5);
  for (size_t r = 0; r < expected.size(); ++r) {
    CHECK(by_k[r].tokens == expected[r].tokens);
    CHECK(by_p[r].tokens == expected[r].tokens);
  }
}

// Answers that end early leave the batch (the cache drops their rows once a quarter are
// done): every answer, its log-probs included, equals the same prompt generated alone.
TEST_CASE("generation: answers leaving the batch early change no other answer", "[rl][generation]") {
  auto model = load_causal_lm(kModel, at::kFloat);
  SamplingParams p;
  p.max_new_tokens = 12;
  p.temperature = 2.0;  // a flat distribution: the stop tokens below come at different steps
  for (int64_t id = 0; id < 40; ++id) p.stop_ids.push_back(id);
  std::vector<std::vector<int64_t>> many;
  for (int64_t r = 0; r < 10; ++r) many.push_back({5 + r, 17, 3 + 2 * r, 40 - r});
  many.push_back(prompts()[1]);  // a longer prompt among them
  std::vector<at::Generator> generators;
  for (size_t r = 0; r < many.size(); ++r) generators.push_back(answer_generator(11, 0, static_cast<int64_t>(r), 0));
  std::vector<Generated> together = generate(*model, many, p, generators);
  std::set<size_t> lengths;
  for (const auto& g : together) lengths.insert(g.tokens.size());
  CHECK(lengths.size() >= 3);  // rows finished at several different steps
  for (size_t r = 0; r < many.size(); ++r) {
    INFO("row " << r);
    std::vector<at::Generator> alone = {answer_generator(11, 0, static_cast<int64_t>(r), 0)};
    Generated single = generate(*model, {many[r]}, p, alone)[0];
    CHECK(single.tokens == together[r].tokens);
    REQUIRE(single.logprobs.size() == together[r].logprobs.size());
    for (size_t k = 0; k < single.logprobs.size(); ++k)
      CHECK(single.logprobs[k] == Approx(together[r].logprobs[k]).margin(1e-5));
    CHECK(single.truncated == together[r].truncated);
  }
}

// A group's answers to one prompt: one prefill, its keys and values copied to the other
// answers' rows. Each answer equals its prompt's answer generated alone, in one batch
// and with refills (max_rows 3: later answers start beside running ones).
TEST_CASE("generation: answers to one prompt share its prefill and equal the prompt generated alone",
          "[rl][generation]") {
  auto model = load_causal_lm(kModel, at::kFloat);
  SamplingParams p;
  p.max_new_tokens = 20;  // past the prompts' first cache block of 16 tokens
  p.temperature = 1.5;
  const std::vector<int64_t> a = {5, 17, 3, 40}, b = prompts()[1], c = {7};
  const std::vector<std::vector<int64_t>> many = {a, b, a, a, c, b, a};
  auto generators = [&] {
    std::vector<at::Generator> g;
    for (size_t r = 0; r < many.size(); ++r) g.push_back(answer_generator(17, 0, static_cast<int64_t>(r), 0));
    return g;
  };
  for (const int64_t max_rows : {int64_t{0}, int64_t{3}}) {
    p.max_rows = max_rows;
    std::vector<at::Generator> all = generators();
    const std::vector<Generated> together = generate(*model, many, p, all);
    std::set<std::vector<int64_t>> distinct;
    for (size_t r = 0; r < many.size(); ++r) {
      INFO("max_rows " << max_rows << ", answer " << r);
      std::vector<at::Generator> alone = {answer_generator(17, 0, static_cast<int64_t>(r), 0)};
      SamplingParams one = p;
      one.max_rows = 0;
      const Generated single = generate(*model, {many[r]}, one, alone)[0];
      CHECK(single.tokens == together[r].tokens);
      REQUIRE(single.logprobs.size() == together[r].logprobs.size());
      for (size_t k = 0; k < single.logprobs.size(); ++k)
        CHECK(single.logprobs[k] == Approx(together[r].logprobs[k]).margin(1e-5));
      if (many[r] == a) distinct.insert(together[r].tokens);
    }
    CHECK(distinct.size() == 4);  // the four answers to `a` were sampled apart
  }
}

// Continuous batching: with at most max_rows answers in flight, a finished answer's
// row goes to the next waiting prompt at once. Every answer, its log-probs and its
// truncation equal those of one static batch (and so of the prompt generated alone).
TEST_CASE("generation: continuous batching gives the answers of one static batch", "[rl][generation]") {
  auto model = load_causal_lm(kModel, at::kFloat);
  SamplingParams p;
  p.max_new_tokens = 10;
  p.min_new_tokens = 2;  // held back per answer, whenever it started
  p.temperature = 2.0;
  for (int64_t id = 0; id < 12; ++id) p.stop_ids.push_back(id);
  std::vector<std::vector<int64_t>> many;
  for (int64_t r = 0; r < 9; ++r) many.push_back({5 + r, 17, 3 + 2 * r, 40 - r});
  many.push_back(prompts()[1]);  // a longer prompt that waits for a row
  many.push_back({7});
  auto generators = [&] {
    std::vector<at::Generator> g;
    for (size_t r = 0; r < many.size(); ++r) g.push_back(answer_generator(13, 0, static_cast<int64_t>(r), 0));
    return g;
  };
  auto static_generators = generators();
  const std::vector<Generated> together = generate(*model, many, p, static_generators);
  std::set<size_t> lengths;
  size_t truncated = 0;
  for (const auto& g : together) {
    lengths.insert(g.tokens.size());
    truncated += g.truncated;
    CHECK(g.tokens.size() >= 2);
  }
  CHECK(lengths.size() >= 3);  // answers end at different steps, so rows are refilled at different steps
  CHECK(truncated >= 1);       // and some run to max_new_tokens
  for (int64_t max_rows : {1, 3, 4}) {
    INFO("max_rows = " << max_rows);
    SamplingParams refilled = p;
    refilled.max_rows = max_rows;
    auto g = generators();
    const std::vector<Generated> got = generate(*model, many, refilled, g);
    for (size_t r = 0; r < many.size(); ++r) {
      INFO("answer " << r);
      CHECK(got[r].tokens == together[r].tokens);
      CHECK(got[r].truncated == together[r].truncated);
      REQUIRE(got[r].logprobs.size() == together[r].logprobs.size());
      for (size_t k = 0; k < got[r].logprobs.size(); ++k)
        CHECK(got[r].logprobs[k] == Approx(together[r].logprobs[k]).margin(1e-5));
    }
  }
}

TEST_CASE("generation: the rollout's memory estimate and the refusal when it does not fit", "[rl][generation]") {
  auto model = load_causal_lm(kModel, at::kFloat);
  const ModelConfig& c = model->config();
  int64_t parameters = 0, layer0 = 0, embedding = 0;
  for (const auto& p : model->named_parameters()) {
    parameters += p.value().numel();
    if (p.key().rfind("model.layers.0.", 0) == 0) layer0 += p.value().numel();
    if (p.key() == "model.embed_tokens.weight" || p.key() == "model.norm.weight") embedding += p.value().numel();
  }
  CHECK(largest_unit_parameters(c) == std::max(layer0, embedding));
  REQUIRE(c.num_key_value_heads % 2 == 0);
  for (int64_t t : {1, 2}) {
    // weights / t + the unit being sliced (float32 + dtype) + cache / t (rows x tokens,
    // 10 + 20 in blocks of 16 = 32, x layers x k,v x kv heads x head dim) + one step's
    // logits of this rank's vocabulary
    // columns (dtype) and sampling's work on them (40 bytes per column)
    const int64_t expected = (parameters + t - 1) / t * 4 + std::max(layer0, embedding) * 8 +
                             8 * 32 * c.num_hidden_layers * 2 * (c.num_key_value_heads / t) * c.head_dim * 4 +
                             8 * ((c.vocab_size + t - 1) / t) * (4 + 40);
    CHECK(rollout_memory_bytes(c, parameters, at::kFloat, 8, 10, 20, t, /*packed_weights=*/false) == expected);
    // On the CPU a tied head's packed copy sits beside the embedding.
    const int64_t tied_copy = c.tie_word_embeddings ? (c.vocab_size + t - 1) / t * c.hidden_size * 4 : 0;
    CHECK(rollout_memory_bytes(c, parameters, at::kFloat, 8, 10, 20, t, /*packed_weights=*/true) == expected + tied_copy);
  }
  CHECK(free_memory_bytes(at::Device("cpu")) > 0);
  CHECK_NOTHROW(check_rollout_memory(c, parameters, at::kFloat, 8, 10, 20, 1, at::Device("cpu")));
  CHECK_THROWS_WITH(check_rollout_memory(c, parameters, at::kFloat, 1 << 20, 1 << 20, 1 << 20, 2, at::Device("cpu")),
                    Catch::Matchers::Contains("the rollout needs") && Catch::Matchers::Contains("is free") &&
                        Catch::Matchers::Contains("rollout.backend"));
}

TEST_CASE("generation: the sampler draws from softmax(logits / temperature) over the top-k and top-p tokens",
          "[rl][generation]") {
  // Six tokens, 20000 rows with their own seeds: each token's frequency is its
  // probability within 4 standard errors; top_k and top_p keep exactly the tokens the
  // definitions keep (computed here by hand); the log-prob is that of the unfiltered
  // distribution, and a held-back stop id is never drawn.
  const int64_t rows = 20000;
  const std::vector<float> row = {2.0f, 1.0f, 0.5f, 0.0f, -1.0f, 1.5f};
  const at::Tensor logits = at::tensor(row).unsqueeze(0).expand({rows, 6}).contiguous();
  auto frequencies = [&](const SamplingParams& p, const std::vector<bool>& hold, std::vector<float>* logprobs) {
    std::vector<at::Generator> generators;
    for (int64_t r = 0; r < rows; ++r) generators.push_back(answer_generator(21, 0, r, 0));
    const NextTokens next = sample_next({logits, 0, 6}, p, generators, hold, nullptr);
    std::vector<double> counts(6, 0);
    for (int64_t r = 0; r < rows; ++r) {
      counts[next.tokens[r]] += 1.0 / rows;
      if (logprobs) (*logprobs)[next.tokens[r]] = next.logprobs[r];
    }
    return counts;
  };
  auto expect = [&](const std::vector<double>& got, at::Tensor probs) {
    for (int64_t v = 0; v < 6; ++v) {
      const double want = probs[v].item<double>();
      INFO("token " << v << ": frequency " << got[v] << ", probability " << want);
      CHECK(std::abs(got[v] - want) <= 4 * std::sqrt(want * (1 - want) / rows) + 1e-12);
    }
  };
  const at::Tensor scaled = at::tensor(row).to(at::kDouble) / 0.8;
  SamplingParams p;
  p.temperature = 0.8;
  std::vector<bool> none(rows, false);
  std::vector<float> logprobs(6, 0);
  expect(frequencies(p, none, &logprobs), scaled.softmax(0));
  for (int64_t v = 0; v < 6; ++v)
    if (logprobs[v] != 0) CHECK(logprobs[v] == Approx(scaled.log_softmax(0)[v].item<double>()).margin(1e-5));
  {  // The six tokens spread over 1,000 columns (the rest at -1e4: weight 0): the running sum passes
    // the sampler's blocks of columns, two of the tokens on either side of one's edge.
    const std::vector<int64_t> ids = {3, 255, 256, 511, 700, 999};
    at::Tensor wide = at::full({rows, 1000}, -1e4f);
    for (int64_t v = 0; v < 6; ++v) wide.select(1, ids[v]).fill_(row[v]);
    std::vector<at::Generator> generators;
    for (int64_t r = 0; r < rows; ++r) generators.push_back(answer_generator(22, 0, r, 0));
    const NextTokens next = sample_next({wide, 0, 1000}, p, generators, none, nullptr);
    std::vector<double> counts(6, 0);
    for (int64_t r = 0; r < rows; ++r) {
      const auto at = std::find(ids.begin(), ids.end(), next.tokens[r]);
      REQUIRE(at != ids.end());
      counts[at - ids.begin()] += 1.0 / rows;
    }
    expect(counts, scaled.softmax(0));
  }
  // top_k 3: tokens 0, 5, 1.
  SamplingParams k3 = p;
  k3.top_k = 3;
  expect(frequencies(k3, none, nullptr), scaled.index_fill(0, at::tensor({2, 3, 4}, at::kLong), -INFINITY).softmax(0));
  // top_p: the probabilities sorted are 0.481 (token 0), 0.257 (5), 0.138 (1), ...; a
  // token stays while the ones before it hold less than top_p.
  SamplingParams nucleus = p;
  nucleus.top_p = 0.75;  // 0.481 + 0.257 = 0.738 < 0.75: tokens 0, 5 and 1
  expect(frequencies(nucleus, none, nullptr), scaled.index_fill(0, at::tensor({2, 3, 4}, at::kLong), -INFINITY).softmax(0));
  nucleus.top_p = 0.7;  // tokens 0 and 5
  expect(frequencies(nucleus, none, nullptr), scaled.index_fill(0, at::tensor({1, 2, 3, 4}, at::kLong), -INFINITY).softmax(0));
  nucleus.top_p = 0.45;  // token 0 alone
  CHECK(frequencies(nucleus, none, nullptr)[0] == Approx(1.0));
  // Token 0 as a held-back stop id.
  SamplingParams stop = p;
  stop.stop_ids = {0};
  std::vector<bool> hold(rows, true);
  std::vector<float> held_logprobs(6, 0);
  const at::Tensor without_0 = scaled.index_fill(0, at::tensor({0}, at::kLong), -INFINITY);
  expect(frequencies(stop, hold, &held_logprobs), without_0.softmax(0));
  CHECK(held_logprobs[5] == Approx(without_0.log_softmax(0)[5].item<double>()).margin(1e-5));
}

namespace {

// The reference for stop strings: the first prefix of `tokens`, decoded whole, that
// contains a stop string (its length), or tokens.size() + 1 when none does.
size_t first_stop_by_full_decode(const Tokenizer& tok, const std::vector<int64_t>& tokens,
                                 const std::vector<std::string>& stops, size_t min_tokens = 0) {
  for (size_t k = 1; k <= tokens.size(); ++k) {
    const std::string before = tok.decode({tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(k - 1)});
    const std::string text = tok.decode({tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(k)});
    for (const auto& s : stops) {
      size_t in_text = 0, in_before = 0;
      for (size_t at = text.find(s); at != std::string::npos; at = text.find(s, at + 1)) ++in_text;
      for (size_t at = before.find(s); at != std::string::npos; at = before.find(s, at + 1)) ++in_before;
      if (k > min_tokens && in_text > in_before) return k;
    }
  }
  return tokens.size() + 1;
}

// The first prefix length at which the matcher fires, checked after every token.
size_t first_stop_by_matcher(const StopStrings& stops, const std::vector<int64_t>& tokens, size_t min_tokens = 0) {
  for (size_t k = min_tokens + 1; k <= tokens.size(); ++k)
    if (stops.completed_by_last_token({tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(k)})) return k;
  return tokens.size() + 1;
}

}  // namespace

TEST_CASE("stop strings: an answer ends at the token that completes one, across token boundaries", "[rl][generation]") {
  // A real BPE vocabulary (Qwen2-style tokenizer.json): stop strings fall inside tokens
  // and across them; the reference decodes every prefix whole.
  auto tok = load_tokenizer(source_path("tests/fixtures/models/tiny_chat"), "");
  const std::string text = "Let me compute: <calc>123*456</calc> so it is 56088.\nAnswer: 56088</answer> done";
  const std::vector<int64_t> tokens = tok->encode(text);
  REQUIRE(tok->decode(tokens) == text);
  for (const std::vector<std::string>& stops :
       std::vector<std::vector<std::string>>{{"</calc>"}, {"</answer>"}, {"Answer:"}, {"</answer>", "</calc>"},
                                             {"88"}, {"\n"}, {"never there"}}) {
    INFO(stops[0]);
    StopStrings matcher(stops, *tok);
    const size_t want = first_stop_by_full_decode(*tok, tokens, stops);
    CHECK(first_stop_by_matcher(matcher, tokens) == want);
    if (stops[0] == "never there") CHECK(want == tokens.size() + 1);
    else CHECK(want <= tokens.size());
  }
  // "</calc>" spans several tokens here: the matcher fires only at the last of them.
  StopStrings calc({"</calc>"}, *tok);
  const size_t k = first_stop_by_full_decode(*tok, tokens, {"</calc>"});
  CHECK(tok->decode({tokens[k - 1]}).find("</calc>") == std::string::npos);
  CHECK_FALSE(calc.completed_by_last_token({tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(k - 1)}));
  // Held back by min_new_tokens past the first "88", the second one ends the answer.
  StopStrings eighty_eight({"88"}, *tok);
  const size_t first = first_stop_by_full_decode(*tok, tokens, {"88"});
  const size_t second = first_stop_by_full_decode(*tok, tokens, {"88"}, first);
  CHECK(second > first);
  CHECK(second <= tokens.size());
  CHECK(first_stop_by_matcher(eighty_eight, tokens, first) == second);
  CHECK_THROWS_WITH(StopStrings({""}, *tok), Catch::Matchers::Contains("empty stop string"));
}

TEST_CASE("generation: a stop check ends one row at its token, the others go on, min_new_tokens holds it",
          "[rl][generation]") {
  auto model = load_causal_lm(kModel, at::kFloat);
  SamplingParams p = greedy(8);
  std::vector<at::Generator> none;
  std::vector<Generated> free_run = generate(*model, prompts(), p, none);
  // Stop when the answer ends with row 1's second and third tokens (a two-token "string").
  const std::vector<int64_t> pair = {free_run[1].tokens[1], free_run[1].tokens[2]};
  auto ends_with_pair = [&](const std::vector<int64_t>& t, size_t n) {
    return n >= 2 && t[n - 2] == pair[0] && t[n - 1] == pair[1];
  };
  int64_t calls = 0;
  p.stop_check = [&](const std::vector<int64_t>& answer, size_t) {
    ++calls;
    return ends_with_pair(answer, answer.size());
  };
  std::vector<Generated> out = generate(*model, prompts(), p, none);
  for (size_t r = 0; r < out.size(); ++r) {
    size_t n = free_run[r].tokens.size();
    for (size_t k = 1; k <= free_run[r].tokens.size(); ++k)
      if (ends_with_pair(free_run[r].tokens, k)) {
        n = k;
        break;
      }
    INFO("row " << r);
    CHECK(out[r].tokens == std::vector<int64_t>(free_run[r].tokens.begin(), free_run[r].tokens.begin() + n));
    CHECK(out[r].truncated == !ends_with_pair(out[r].tokens, out[r].tokens.size()));
  }
  CHECK(out[1].tokens.size() <= 3);
  CHECK_FALSE(out[1].truncated);
  CHECK(calls > 0);
  // min_new_tokens: the check is not asked before, so the answers run on.
  p.min_new_tokens = 8;
  for (const auto& g : generate(*model, prompts(), p, none)) CHECK(g.tokens.size() == 8);
}

// Routing replay's record: each token that ran goes with the experts its router chose,
// in sequence order (prompt, then the answer but its last token), the same as the full
// forward's own choices over prompt + answer; also when answers refill rows.
TEST_CASE("generation: a mixture of experts' recorded experts are the full forward's choices", "[rl][generation][moe]") {
  for (const auto& name : {"qwen3_moe", "mixtral"}) {
    INFO(name);
    auto model = load_causal_lm(source_path(std::string("tests/fixtures/models/") + name), at::kFloat);
    const ModelConfig& c = model->config();
    SamplingParams p;
    p.max_new_tokens = 6;
    p.max_rows = 2;  // three prompts: one waits for a row
    p.record_experts = true;
    std::vector<at::Generator> generators;
    for (int64_t r = 0; r < 3; ++r) generators.push_back(answer_generator(3, 0, r, 0));
    const std::vector<Generated> out = generate(*model, prompts(), p, generators);
    for (size_t r = 0; r < out.size(); ++r) {
      INFO("answer " << r);
      std::vector<int64_t> ids = prompts()[r];
      ids.insert(ids.end(), out[r].tokens.begin(), out[r].tokens.end());
      std::vector<ExpertChoices> own;
      {
        at::NoGradGuard no_grad;
        model->forward(at::tensor(ids, at::kLong).unsqueeze(0), {}, nullptr, nullptr, &own);
      }
      std::vector<at::Tensor> layers;
      for (const ExpertChoices& o : own) layers.push_back(o.chosen);
      const int64_t ran = static_cast<int64_t>(ids.size()) - 1;
      const at::Tensor want = at::stack(layers, 1).narrow(0, 0, ran).reshape({-1}).to(at::kShort);
      REQUIRE(static_cast<int64_t>(out[r].experts.size()) == ran * c.sparse_layer_count() * c.num_experts_per_tok);
      CHECK(at::equal(at::tensor(out[r].experts, at::kShort), want));
    }
    // Not asked for: nothing kept.
    p.record_experts = false;
    std::vector<at::Generator> again;
    for (int64_t r = 0; r < 3; ++r) again.push_back(answer_generator(3, 0, r, 0));
    CHECK(generate(*model, prompts(), p, again)[0].experts.empty());
  }
}

// A process samples many rows of a wide vocabulary in chunks of rows (sample_next keeps
// each chunk's work in the cache): every row's token and log-prob are those of the row
// sampled on its own with its generator, for plain, top-k, top-p and greedy sampling,
// with a row held back from its stop ids.
TEST_CASE("sampling: rows of a wide vocabulary in chunks give each row's own draw", "[rl][generation]") {
  const int64_t rows = 20, vocab = 152064;  // Qwen2's vocabulary: 6 rows per chunk
  const at::Tensor logits = at::randn({rows, vocab}, at::make_generator<at::CPUGeneratorImpl>(4)) * 3;
  std::vector<bool> hold(rows, false);
  hold[7] = true;
  for (const auto& [top_k, top_p, greedy] : {std::tuple{int64_t{0}, 1.0, false}, {int64_t{50}, 1.0, false},
                                             {int64_t{0}, 0.9, false}, {int64_t{0}, 1.0, true}}) {
    INFO("top_k " << top_k << ", top_p " << top_p << (greedy ? ", greedy" : ""));
    SamplingParams p;
    p.greedy = greedy;
    p.top_k = top_k;
    p.top_p = top_p;
    p.temperature = 0.7;
    p.stop_ids = {static_cast<int64_t>(logits[7].argmax().item<int64_t>())};  // row 7's likeliest, held back
    auto generators = [&] {
      std::vector<at::Generator> g;
      for (int64_t r = 0; r < rows; ++r) g.push_back(answer_generator(9, 1, r, 0));
      return g;
    };
    std::vector<at::Generator> together = generators(), alone = generators();
    const NextTokens all = sample_next({logits, 0, vocab}, p, together, hold, nullptr);
    REQUIRE(all.tokens.size() == static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      INFO("row " << r);
      std::vector<at::Generator> one;
      if (!greedy) one.push_back(alone[r]);
      const NextTokens own = sample_next({logits.narrow(0, r, 1), 0, vocab}, p, one, {hold[r]}, nullptr);
      CHECK(all.tokens[r] == own.tokens[0]);
      CHECK(all.logprobs[r] == Approx(own.logprobs[0]).margin(1e-5));
    }
    CHECK(all.tokens[7] != p.stop_ids[0]);
  }
}
