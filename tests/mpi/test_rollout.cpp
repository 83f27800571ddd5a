// Tensor-parallel generation from the FSDP shards against the whole model in one
// process (the independent reference), under mpirun -np 1..4: groups of t = 1, 2, 4
// consecutive ranks each take their slices from the shards and generate the same
// prompts; the answers must be the reference's token for token, with the same
// log-probs up to float32 reduction order, and each rank must hold 1/t of the weights.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include "catch_with_torch.h"

#include "areal/fsdp/staged_init.h"
#include "areal/model/hf_weights.h"
#include "areal/reward/environment.h"
#include "areal/rl/episodes.h"
#include "areal/text/chat_template.h"
#include "areal/text/tokenizer.h"
#include "areal/rollout/generation.h"
#include "areal/rollout/rollout_model.h"
#include "mpi_fixture.h"
#include "test_paths.h"

using namespace areal;
using areal::testing::g_comm;
using areal::testing::g_me;

namespace {

const std::string kFixtures = source_path("tests/fixtures/models");

// Bytes a rank of a group of t holds: the norms and routers whole, a row-parallel bias on the
// group's first rank only, k/v projections for one key/value head when there are fewer
// than t, every other weight split in t.
int64_t expected_slice_bytes(CausalLM& whole, int64_t t, int64_t group_rank) {
  const int64_t kv_heads = whole.config().num_key_value_heads;
  int64_t elements = 0;
  for (const auto& p : whole.named_parameters()) {
    const std::string& name = p.key();
    const int64_t n = p.value().numel();
    if (name.find("norm") != std::string::npos) elements += n;
    else if (name.find(".gate.weight") != std::string::npos) elements += n;  // an MoE router: whole on every rank
    else if (name.find("k_proj") != std::string::npos || name.find("v_proj") != std::string::npos)
      elements += kv_heads >= t ? n / t : n / kv_heads;
    else if (name.find("o_proj.bias") != std::string::npos) elements += group_rank == 0 ? n : 0;
    else elements += n / t;
  }
  // A tied head on the CPU: its packed copy beside the embedding (packed_weights.h).
  if (whole.config().tie_word_embeddings) elements += whole.config().vocab_size * whole.config().hidden_size / t;
  return elements * static_cast<int64_t>(sizeof(float));
}

}  // namespace

TEST_CASE("rollout: tensor-parallel generation from the shards equals the whole model's", "[mpi][rollout]") {
  // qwen2_yarn: rope-scaled (YaRN, with its factor on cos and sin), generating past its
  // original_max_position_embeddings (16); llama31, qwen2_linear, llama_dynamic: the
  // other rope types.
  // gemma2: soft-capped attention in the paged decode kernel; gemma3_text: local rope;
  // *_window: sliding windows of 4 tokens in the prefill and the paged decode.
  for (const auto& name : {"qwen2_tied", "qwen2_untied", "qwen3", "llama_mha_bias", "qwen2_yarn", "mistral", "gemma2",
                           "gemma3_text", "mistral_window", "gemma3_window", "llama_dynamic", "llama31",
                           "qwen2_linear", "qwen3_moe", "mixtral"}) {
    const std::string path = kFixtures + "/" + name;
    auto whole = load_causal_lm(path, at::kFloat);
    const ModelConfig& c = whole->config();
    Config cfg;
    cfg.model_path = path;
    cfg.fsdp.memory_efficient_load = true;
    cfg.device = "cpu";
    InitResult init = staged_init(cfg, g_me, *g_comm);
    Policy sharded(cfg, *init.model, *g_comm);

    // Three prompts of different lengths, two answers each, sampled and greedy.
    std::vector<std::vector<int64_t>> prompts;
    at::Tensor ids = at::randint(c.vocab_size, {6, 7}, at::make_generator<at::CPUGeneratorImpl>(5), at::kLong);
    for (int64_t i = 0; i < 6; ++i) {
      std::vector<int64_t> prompt(ids[i].data_ptr<int64_t>(), ids[i].data_ptr<int64_t>() + 3 + i % 3 * 2);
      prompts.push_back(prompt);
    }
    SamplingParams sampled;
    sampled.max_new_tokens = 12;
    sampled.stop_ids = {3};
    sampled.temperature = 0.8;
    sampled.record_experts = true;  // a mixture of experts: the same experts at every t
    SamplingParams greedy = sampled;
    greedy.greedy = true;
    auto generators = [&] {
      std::vector<at::Generator> g;
      for (int64_t i = 0; i < 6; ++i) g.push_back(answer_generator(1, 0, i / 2, i % 2));
      return g;
    };
    std::vector<at::Generator> none, reference_generators = generators();
    const std::vector<Generated> want_sampled = generate(*whole, prompts, sampled, reference_generators);
    const std::vector<Generated> want_greedy = generate(*whole, prompts, greedy, none);

    int64_t bytes_at_t1 = 0;  // weights + KV cache of one rank at t = 1
    for (int64_t t : {1, 2, 4}) {
      if (g_me.world_size % t != 0) continue;  // t = 4 with 2 key/value heads: each on 2 ranks
      INFO(name << ", t = " << t);
      std::unique_ptr<Communicator> group = t > 1 ? g_comm->split(g_me.rank / t, g_me.rank % t) : nullptr;
      RolloutModel policy(sharded, group.get(), at::kFloat, at::Device("cpu"));
      CHECK(policy.weight_bytes() == expected_slice_bytes(*whole, t, g_me.rank % t));
      CHECK(policy.local_kv_heads() == std::max<int64_t>(1, c.num_key_value_heads / t));

      std::vector<at::Generator> mine = generators(), mine_refilled = generators();
      int64_t cache_bytes = 0;
      const std::vector<Generated> got_sampled = generate(policy, prompts, sampled, mine, &cache_bytes);
      // The same rows at t ranks: a rank holds 1/t of the weights and of the KV cache
      // (the norms whole; with fewer key/value heads than t, one head each).
      const int64_t bytes = policy.weight_bytes() + cache_bytes;
      if (t == 1) bytes_at_t1 = bytes;
      const double ratio = static_cast<double>(bytes) / static_cast<double>(bytes_at_t1);
      INFO("weights + KV cache per rank: " << bytes << " bytes, " << ratio << "x of t = 1");
      if (t == 4 && c.num_key_value_heads % 4 == 0) CHECK(ratio <= 0.35);
      if (t == 2) CHECK(ratio <= 0.6);
      const std::vector<Generated> got_greedy = generate(policy, prompts, greedy, none);
      SamplingParams two_rows = sampled;  // continuous batching: two rows, refilled as answers end
      two_rows.max_rows = 2;
      const std::vector<Generated> got_refilled = generate(policy, prompts, two_rows, mine_refilled);
      for (size_t i = 0; i < prompts.size(); ++i) {
        INFO("answer " << i);
        for (const auto& [got, want] : {std::pair{&got_sampled[i], &want_sampled[i]}, {&got_greedy[i], &want_greedy[i]},
                                        {&got_refilled[i], &want_sampled[i]}}) {
          REQUIRE(got->tokens == want->tokens);
          CHECK(got->truncated == want->truncated);
          CHECK(got->experts == want->experts);
          CHECK(got->experts.empty() == (c.num_experts == 0));
          for (size_t k = 0; k < got->logprobs.size(); ++k)
            CHECK(std::abs(got->logprobs[k] - want->logprobs[k]) < 1e-5);
        }
      }
      if (c.num_experts == 0 || t == 1) continue;
      // rollout.backend eT: the experts whole, E/t on each rank (the same bytes as 1/t of
      // each), each rank running its own experts' rows: the same answers.
      RolloutModel whole_experts(sharded, group.get(), at::kFloat, at::Device("cpu"), /*whole_experts=*/true);
      CHECK(whole_experts.weight_bytes() == policy.weight_bytes());
      int64_t expert_weights = 0;
      for (const auto& [slice_name, slice] : whole_experts.named_slices())
        if (slice_name.find(".experts.") != std::string::npos) {
          ++expert_weights;
          CHECK(slice.sizes() == whole->named_parameters()[slice_name].sizes());
        }
      CHECK(expert_weights == 3 * c.sparse_layer_count() * c.num_experts / t);
      std::vector<at::Generator> mine_whole = generators();
      const std::vector<Generated> whole_sampled = generate(whole_experts, prompts, sampled, mine_whole);
      const std::vector<Generated> whole_greedy = generate(whole_experts, prompts, greedy, none);
      for (size_t i = 0; i < prompts.size(); ++i) {
        INFO("answer " << i << ", experts whole");
        for (const auto& [got, want] : {std::pair{&whole_sampled[i], &want_sampled[i]}, {&whole_greedy[i], &want_greedy[i]}}) {
          REQUIRE(got->tokens == want->tokens);
          CHECK(got->experts == want->experts);
          for (size_t k = 0; k < got->logprobs.size(); ++k)
            CHECK(std::abs(got->logprobs[k] - want->logprobs[k]) < 1e-5);
        }
      }
    }
  }
}

TEST_CASE("rollout: a tensor-parallel size that does not split the heads is refused by name", "[mpi][rollout]") {
  ModelConfig c;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.intermediate_size = 48;
  CHECK_NOTHROW(check_tensor_parallel(c, 2));
  CHECK_NOTHROW(check_tensor_parallel(c, 4));  // each key/value head on 2 ranks
  CHECK(tensor_parallel_kv_heads(c, 4) == 1);
  CHECK_THROWS_WITH(check_tensor_parallel(c, 3), Catch::Matchers::Contains("rollout.backend") &&
                                                     Catch::Matchers::Contains("4 attention heads"));
  c.num_attention_heads = 12;
  c.num_key_value_heads = 4;
  c.intermediate_size = 48;
  CHECK_THROWS_WITH(check_tensor_parallel(c, 6), Catch::Matchers::Contains("4 key/value heads"));
  c.intermediate_size = 50;
  CHECK_THROWS_WITH(check_tensor_parallel(c, 4), Catch::Matchers::Contains("intermediate_size"));
  // A mixture of experts: each expert's channels split over t, or (eT) the experts whole.
  c.intermediate_size = 48;
  c.num_experts = 6;
  c.moe_intermediate_size = 12;
  CHECK_NOTHROW(check_tensor_parallel(c, 4));
  CHECK_THROWS_WITH(check_tensor_parallel(c, 4, /*whole_experts=*/true),
                    Catch::Matchers::Contains("6 experts do not divide over 4 ranks"));
  CHECK_NOTHROW(check_tensor_parallel(c, 2, /*whole_experts=*/true));
  c.num_experts = 0;
  CHECK_THROWS_WITH(check_tensor_parallel(c, 2, /*whole_experts=*/true), Catch::Matchers::Contains("dense"));
}

TEST_CASE("rollout: sampling over vocabulary slices picks the tokens and log-probs of the whole vocabulary",
          "[mpi][rollout]") {
  // Random logits of 6 rows over 103 tokens (not a multiple of t: the last rank's
  // columns are partly padding); each group of t ranks splits the columns as
  // RolloutModel does, t = 1 is the whole vocabulary in one process.
  const int64_t rows = 6;
  int64_t vocab = 103;
  at::Tensor logits = 3 * at::randn({rows, vocab}, at::make_generator<at::CPUGeneratorImpl>(11));
  SamplingParams plain;
  plain.temperature = 0.7;
  plain.stop_ids = {4, 100};
  SamplingParams greedy = plain, top_k = plain, top_p = plain, both = plain;
  greedy.greedy = true;
  top_k.top_k = 5;
  top_p.top_p = 0.6;
  both.top_k = 7;
  both.top_p = 0.8;
  const std::vector<bool> hold_stop = {true, false, false, true, false, false};
  auto draw = [&](const SamplingParams& p, int64_t t, Communicator* group, int64_t group_rank) {
    const int64_t columns = (vocab + t - 1) / t, first = group_rank * columns;
    VocabSlice slice{at::zeros({rows, columns}), first, vocab};
    const int64_t real = std::min(columns, vocab - first);
    slice.logits.narrow(1, 0, real).copy_(logits.narrow(1, first, real));
    std::vector<NextTokens> steps;
    std::vector<at::Generator> generators;
    for (int64_t r = 0; r < rows; ++r) generators.push_back(answer_generator(7, 0, r, 0));
    for (int step = 0; step < 20; ++step) steps.push_back(sample_next(slice, p, generators, hold_stop, group));
    return steps;
  };
  // A wide vocabulary whose nucleus does not fit the first partial selection (64 tokens)
  // on one rank and does on another: ids below 1000 share 45 % of the mass over 1000
  // tokens, ten ids above hold the rest; top_p 0.3.
  at::Tensor wide = at::full({rows, 2000}, -30.0f);
  wide.narrow(1, 0, 1000).copy_(0.05 * at::randn({rows, 1000}, at::make_generator<at::CPUGeneratorImpl>(12)));
  wide.narrow(1, 1000, 10).fill_(std::log(0.55f / 0.45f * 1000 / 10));
  SamplingParams wide_nucleus = plain;
  wide_nucleus.top_p = 0.3;
  wide_nucleus.stop_ids = {};
  for (const SamplingParams* p : {&plain, &greedy, &top_k, &top_p, &both, &wide_nucleus}) {
    if (p == &wide_nucleus) {
      logits = wide;
      vocab = 2000;
    }
    const std::vector<NextTokens> want = draw(*p, 1, nullptr, 0);
    for (int64_t t : {2, 4}) {
      if (g_me.world_size % t != 0) continue;
      INFO("top_k " << p->top_k << ", top_p " << p->top_p << ", greedy " << p->greedy << ", t = " << t);
      std::unique_ptr<Communicator> group = g_comm->split(g_me.rank / t, g_me.rank % t);
      const std::vector<NextTokens> got = draw(*p, t, group.get(), g_me.rank % t);
      for (size_t s = 0; s < want.size(); ++s) {
        REQUIRE(got[s].tokens == want[s].tokens);
        for (int64_t r = 0; r < rows; ++r) CHECK(std::abs(got[s].logprobs[r] - want[s].logprobs[r]) < 1e-5);
      }
    }
  }
}

namespace {

// A deterministic environment: after turn 0 a tool message that depends on the turn's
// text, after turn 1 the end with a reward that does too.
class EchoEnvironment : public Environment {
 public:
  void submit(EnvTurn turn) override { pending_.push_back(std::move(turn)); }
  std::vector<EnvReply> poll(double) override {
    std::vector<EnvReply> out;
    for (const EnvTurn& t : pending_) {
      EnvReply& r = out.emplace_back();
      r.episode = t.episode;
      r.done = t.turn >= 1;
      r.reward = static_cast<double>(t.last.size() % 7) / 7.0;
      r.role = "tool";
      r.message = "got " + std::to_string(t.last.size());
    }
    pending_.clear();
    return out;
  }

 private:
  std::vector<EnvTurn> pending_;
};

}  // namespace

TEST_CASE("rollout: episodes at t = 2 and 4 equal the whole model's, the environment on each group's first rank",
          "[mpi][rollout][episodes]") {
  // The group's first rank alone asks the environment and broadcasts its decisions; the
  // other ranks append the same tokens at the same steps, so every rank of every group
  // ends with the whole model's episodes (sampled, with two rows refilled across turns).
  const std::string path = kFixtures + "/tiny_chat";
  auto whole = load_causal_lm(path, at::kFloat);
  std::unique_ptr<Tokenizer> tokenizer = load_tokenizer(path + "/tokenizer.json", path);
  const PromptTemplate tmpl = prompt_template("qwen", *tokenizer, path);
  std::vector<Prompt> prompts(4);
  for (size_t i = 0; i < prompts.size(); ++i) {
    prompts[i].example.prompt = "Question " + std::to_string(i) + ": what is " + std::to_string(7 * i) + "?";
    prompts[i].ids = prompt_tokens(tmpl, *tokenizer, prompts[i].example.prompt);
  }
  std::vector<std::vector<int64_t>> ids;
  for (const Prompt& p : prompts) ids.push_back(p.ids);
  SamplingParams sampled;
  sampled.max_new_tokens = 6;
  sampled.stop_ids = tmpl.stop_ids;
  sampled.temperature = 0.8;
  sampled.max_tokens = 200;
  const EpisodeSettings settings{3, 0.5, 200};
  auto run = [&](RolloutModel& model, Communicator* group, bool leader, int64_t rows) {
    EchoEnvironment env;
    EpisodeRunner runner(leader ? &env : nullptr, group, *tokenizer, tmpl, tmpl.stop_ids, settings);
    std::vector<at::Generator> generators;
    for (int64_t i = 0; i < 4; ++i) generators.push_back(answer_generator(3, 0, i, 0));
    SamplingParams p = sampled;
    p.max_rows = rows;
    std::vector<Generated> out =
        generate(model, ids, p, generators, nullptr, {}, runner.hooks([&](int64_t id) { return &prompts[id]; }));
    for (size_t i = 0; i < out.size(); ++i) runner.complete(static_cast<int64_t>(i), out[i]);
    return out;
  };
  RolloutModel reference_model(*whole);
  const std::vector<Generated> want = run(reference_model, nullptr, true, 0);
  for (const Generated& e : want) CHECK(e.turns == 2);  // every episode had a tool message

  Config cfg;
  cfg.model_path = path;
  cfg.fsdp.memory_efficient_load = true;
  cfg.device = "cpu";
  InitResult init = staged_init(cfg, g_me, *g_comm);
  Policy sharded(cfg, *init.model, *g_comm);
  for (int64_t t : {1, 2, 4}) {
    if (g_me.world_size % t != 0) continue;
    std::unique_ptr<Communicator> group = t > 1 ? g_comm->split(g_me.rank / t, g_me.rank % t) : nullptr;
    RolloutModel policy(sharded, group.get(), at::kFloat, at::Device("cpu"));
    for (int64_t rows : {0, 2}) {
      INFO("t = " << t << ", rows " << rows);
      const std::vector<Generated> got = run(policy, group.get(), g_me.rank % t == 0, rows);
      for (size_t i = 0; i < want.size(); ++i) {
        INFO("episode " << i);
        REQUIRE(got[i].tokens == want[i].tokens);
        CHECK(got[i].model_tokens == want[i].model_tokens);
        CHECK(got[i].turns == want[i].turns);
        CHECK(got[i].tool_messages == want[i].tool_messages);
        CHECK(got[i].reward == want[i].reward);
        for (size_t k = 0; k < got[i].logprobs.size(); ++k) CHECK(std::abs(got[i].logprobs[k] - want[i].logprobs[k]) < 1e-5);
      }
    }
  }
}
