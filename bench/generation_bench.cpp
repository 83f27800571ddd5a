// areal-train's generation (rollout/generation.h) on one model and one set of prompts,
// timed: the areal-train half of bench/run_generation.sh, whose other half is
// transformers' generate on the same model and prompts (bench/reference/hf_generate.py).
//
//   areal_generation_bench MODEL_DIR PROMPTS.json NEW_TOKENS STOPS OUT.json
//
// PROMPTS.json: a list of token-id lists. Every answer is sampled (temperature 1, no
// top-k/top-p). STOPS = 0: exactly NEW_TOKENS tokens per answer (no stop token), as the
// reference does, so both sides do the same work. STOPS = n > 0: token ids 3 .. 3 + n - 1
// end an answer (with a random model, about n / vocab per token: answers of varied
// lengths, as real ones are); the figure counts the tokens generated. A short untimed
// warm-up runs first.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "areal/model/hf_weights.h"
#include "areal/rollout/generation.h"

using namespace areal;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s MODEL_DIR PROMPTS.json NEW_TOKENS STOPS OUT.json\n", argv[0]);
    return 2;
  }
  const std::vector<std::vector<int64_t>> prompts = nlohmann::json::parse(std::ifstream(argv[2]));
  const int64_t new_tokens = std::stoll(argv[3]), stops = std::stoll(argv[4]);
  auto model = load_causal_lm(argv[1], at::kFloat);

  SamplingParams params;
  params.max_new_tokens = new_tokens;
  for (int64_t id = 3; id < 3 + stops; ++id) params.stop_ids.push_back(id);
  auto generators_for = [&](size_t rows) {
    std::vector<at::Generator> generators;
    for (size_t r = 0; r < rows; ++r) generators.push_back(answer_generator(0, 0, static_cast<int64_t>(r), 0));
    return generators;
  };
  {  // warm-up: a few rows, a few tokens
    SamplingParams warm = params;
    warm.max_new_tokens = 4;
    std::vector<std::vector<int64_t>> few(prompts.begin(), prompts.begin() + std::min<size_t>(4, prompts.size()));
    auto generators = generators_for(few.size());
    generate(*model, few, warm, generators);
  }
  auto generators = generators_for(prompts.size());
  const auto start = std::chrono::steady_clock::now();
  std::vector<Generated> answers = generate(*model, prompts, params, generators);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  int64_t tokens = 0;
  for (const Generated& g : answers) tokens += static_cast<int64_t>(g.tokens.size());
  nlohmann::json out = {{"side", "areal-train"}, {"rows", prompts.size()}, {"new_tokens", new_tokens},
                        {"stops", stops}, {"generated_tokens", tokens}, {"seconds", seconds},
                        {"tokens_per_second", tokens / seconds}};
  std::ofstream(argv[5]) << out.dump(1) << "\n";
  std::printf("areal-train: %zu rows x up to %lld tokens (%lld stop ids): %lld tokens, %.2f s, %.0f tokens/s\n",
              prompts.size(), static_cast<long long>(new_tokens), static_cast<long long>(stops),
              static_cast<long long>(tokens), seconds, tokens / seconds);
  return stops > 0 || tokens == static_cast<int64_t>(prompts.size()) * new_tokens ? 0 : 1;
}
