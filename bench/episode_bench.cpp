// Multi-turn episodes through the generation engine (rollout/generation.h): episodes per
// second when the environment answers each turn after a fixed delay, with continuous
// batching across turns (a row waiting for its environment keeps its KV cache and the
// other rows go on) against turn-synchronous batching (every episode in flight waits
// until all have finished their turn and the slowest reply is in, as a loop of "generate
// the batch's turn, then call the environment for all" does); and the prefill tokens the
// kept KV cache saves (an engine without it prefills the whole episode again each turn).
//
//   areal_episode_bench MODEL_DIR EPISODES TURNS TURN_TOKENS ROWS DELAYS_MS OUT.json
//
// Sampled turns (temperature 1) of up to TURN_TOKENS tokens, of varied lengths as real
// turns are: with a random model each token ends a turn with probability about
// 2 / TURN_TOKENS (that many stop ids); the environment's message is 8 fixed tokens;
// DELAYS_MS a comma-separated list (e.g. 0,10,100). A short untimed warm-up runs first.
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "areal/model/hf_weights.h"
#include "areal/rollout/generation.h"

using namespace areal;
using Clock = std::chrono::steady_clock;

namespace {

struct Result {
  double seconds = 0;
  int64_t prefilled = 0, recomputed = 0;  // tokens prefilled after the first turn: kept cache / none
};

Result run(RolloutModel& model, const std::vector<std::vector<int64_t>>& prompts, int64_t turns, int64_t turn_tokens,
           int64_t rows, double delay, bool continuous) {
  SamplingParams p;
  p.max_new_tokens = turn_tokens;
  const int64_t vocab = model.config().vocab_size;
  for (int64_t id = 3; id < 3 + std::max<int64_t>(1, 2 * vocab / turn_tokens); ++id) p.stop_ids.push_back(id);
  p.max_tokens = static_cast<int64_t>(prompts[0].size()) + turns * (turn_tokens + 9) + 1;
  p.max_rows = rows;
  const std::vector<int64_t> message = {10, 11, 12, 13, 14, 15, 16, 17};
  Result result;
  size_t next = 0;
  int64_t in_flight = 0;
  std::map<int64_t, int64_t> turns_done, length;  // by episode
  std::map<int64_t, Clock::time_point> ready;     // episodes waiting: when their reply comes
  PromptSource source;
  source.next = [&](std::vector<int64_t>& prompt, at::Generator& generator) {
    if (next == prompts.size()) return false;
    generator = answer_generator(0, 0, static_cast<int64_t>(next), 0);
    prompt = prompts[next++];
    ++in_flight;
    return true;
  };
  source.finished = [&](int64_t, Generated) { --in_flight; };
  source.episodes.turn_ended = [&](int64_t id, const Generated& e) {
    ++turns_done[id];
    length[id] = static_cast<int64_t>(prompts[static_cast<size_t>(id)].size() + e.tokens.size());
    ready[id] = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(delay));
  };
  source.episodes.replies = [&](bool wait) {
    std::vector<TurnReply> out;
    if (ready.empty()) return out;
    // Turn-synchronous: nothing comes back while an episode in flight still generates.
    if (!continuous && static_cast<int64_t>(ready.size()) < in_flight) return out;
    Clock::time_point due = ready.begin()->second;
    for (const auto& [id, at] : ready) due = continuous ? std::min(due, at) : std::max(due, at);
    if (Clock::now() < due) {
      if (!wait) return out;
      std::this_thread::sleep_until(due);
    }
    for (auto it = ready.begin(); it != ready.end();) {
      if (it->second > Clock::now()) {
        ++it;
        continue;
      }
      const int64_t id = it->first;
      if (turns_done[id] >= turns) {
        out.push_back({id, true, {}});
      } else {
        out.push_back({id, false, message});
        result.prefilled += static_cast<int64_t>(message.size()) + 1;
        result.recomputed += length[id] + static_cast<int64_t>(message.size());
      }
      it = ready.erase(it);
    }
    return out;
  };
  const auto start = Clock::now();
  generate_stream(model, p, static_cast<int64_t>(prompts[0].size()), rows, source);
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr, "usage: %s MODEL_DIR EPISODES TURNS TURN_TOKENS ROWS DELAYS_MS OUT.json\n", argv[0]);
    return 2;
  }
  const int64_t episodes = std::stoll(argv[2]), turns = std::stoll(argv[3]), turn_tokens = std::stoll(argv[4]),
                rows = std::stoll(argv[5]);
  std::vector<double> delays;
  std::stringstream list(argv[6]);
  for (std::string item; std::getline(list, item, ',');) delays.push_back(std::stod(item) / 1000.0);
  auto whole = load_causal_lm(argv[1], at::kFloat);
  RolloutModel model(*whole);
  // Prompts of 32 tokens, different per episode.
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t e = 0; e < episodes; ++e) {
    std::vector<int64_t> prompt;
    const int64_t first = whole->config().vocab_size / 2;  // past the stop ids
    for (int64_t k = 0; k < 32; ++k) prompt.push_back(first + (e * 31 + k * 7) % (whole->config().vocab_size - first));
    prompts.push_back(prompt);
  }
  run(model, {prompts.begin(), prompts.begin() + std::min<int64_t>(4, episodes)}, 2, 4, rows, 0, true);  // warm-up
  nlohmann::json out = nlohmann::json::array();
  for (double delay : delays)
    for (bool continuous : {true, false}) {
      const Result r = run(model, prompts, turns, turn_tokens, rows, delay, continuous);
      std::printf("delay %5.0f ms  %-17s  %6.2f episodes/s  (%.2f s)  prefill after turn 1: %lld tokens, %lld "
                  "without the kept cache\n",
                  delay * 1000, continuous ? "continuous" : "turn-synchronous", episodes / r.seconds, r.seconds,
                  static_cast<long long>(r.prefilled), static_cast<long long>(r.recomputed));
      std::fflush(stdout);
      out.push_back({{"delay_ms", delay * 1000}, {"batching", continuous ? "continuous" : "turn-synchronous"},
                     {"episodes", episodes}, {"turns", turns}, {"turn_tokens", turn_tokens}, {"rows", rows},
                     {"seconds", r.seconds}, {"episodes_per_second", episodes / r.seconds},
                     {"prefill_tokens", r.prefilled}, {"prefill_tokens_without_kept_cache", r.recomputed}});
    }
  std::ofstream(argv[7]) << out.dump(1) << "\n";
  return 0;
}
