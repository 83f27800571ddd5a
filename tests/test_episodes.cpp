// Multi-turn episodes: the engine keeps each episode's KV cache between turns (checked
// against generating every turn again from the whole sequence), other rows decode while
// one waits for its environment, and the episode bookkeeping (message tokens, loss mask,
// turn_discount, limits) against hand-built layouts.
#include <ATen/ATen.h>

#include <deque>
#include <map>
#include <nlohmann/json.hpp>

#include "catch_with_torch.h"

#include "areal/model/hf_weights.h"
#include "areal/reward/environment.h"
#include "areal/reward/reward.h"
#include "areal/util/error.h"
#include "areal/rl/episodes.h"
#include "areal/rollout/generation.h"
#include "areal/text/bpe_tokenizer.h"
#include "areal/text/chat_template.h"
#include "test_paths.h"

using namespace areal;

namespace {

SamplingParams greedy(int64_t max_new_tokens, int64_t max_tokens) {
  SamplingParams p;
  p.greedy = true;
  p.max_new_tokens = max_new_tokens;
  p.max_tokens = max_tokens;
  return p;
}

// Greedy continuation of `ids` by re-running the whole sequence each step (no cache).
std::vector<int64_t> reference_turn(CausalLM& model, std::vector<int64_t> ids, int64_t steps, std::vector<float>& logprobs) {
  at::NoGradGuard no_grad;
  std::vector<int64_t> out;
  for (int64_t s = 0; s < steps; ++s) {
    at::Tensor logits = model.forward(at::tensor(ids, at::kLong).unsqueeze(0)).select(1, -1)[0];
    const int64_t next = logits.argmax().item<int64_t>();
    logprobs.push_back(logits.log_softmax(-1)[next].item<float>());
    out.push_back(next);
    ids.push_back(next);
  }
  return out;
}

// The environment's message after turn k of episode `id`: two tokens that depend on both.
std::vector<int64_t> message_after(int64_t id, int64_t k) { return {30 + id, 40 + k, 7}; }

// An episode generated turn by turn from scratch: turns of `turn_tokens`, the
// environment's messages between them.
Generated reference_episode(CausalLM& model, const std::vector<int64_t>& prompt, int64_t id, int64_t turns,
                            int64_t turn_tokens) {
  Generated e;
  std::vector<int64_t> ids = prompt;
  for (int64_t k = 0; k < turns; ++k) {
    std::vector<float> logprobs;
    const std::vector<int64_t> turn = reference_turn(model, ids, turn_tokens, logprobs);
    ids.insert(ids.end(), turn.begin(), turn.end());
    e.tokens.insert(e.tokens.end(), turn.begin(), turn.end());
    e.logprobs.insert(e.logprobs.end(), logprobs.begin(), logprobs.end());
    e.model_tokens.insert(e.model_tokens.end(), turn.size(), 1);
    if (k + 1 == turns) break;
    const std::vector<int64_t> message = message_after(id, k);
    ids.insert(ids.end(), message.begin(), message.end());
    e.tokens.insert(e.tokens.end(), message.begin(), message.end());
    e.logprobs.insert(e.logprobs.end(), message.size(), 0.0f);
    e.model_tokens.insert(e.model_tokens.end(), message.size(), 0);
  }
  return e;
}

// Hooks that answer each turn with message_after() until `turns` turns, holding episode
// `slow`'s replies back for `hold` polls; they record the order episodes end in.
struct ScriptedHooks {
  int64_t turns = 3, slow = -1, hold = 0;
  std::map<int64_t, int64_t> turns_done;
  std::deque<int64_t> waiting;
  std::map<int64_t, int64_t> held;  // polls seen while waiting
  std::vector<int64_t> ended;
  int64_t polls = 0;
  EpisodeHooks hooks() {
    EpisodeHooks h;
    h.turn_ended = [this](int64_t id, const Generated&) {
      ++turns_done[id];
      waiting.push_back(id);
    };
    h.replies = [this](bool) {
      ++polls;
      std::vector<TurnReply> out;
      std::deque<int64_t> still;
      for (int64_t id : waiting) {
        if (id == slow && held[id]++ < hold) {
          still.push_back(id);
          continue;
        }
        const int64_t k = turns_done[id];
        if (k >= turns) {
          out.push_back({id, true, {}});
          ended.push_back(id);
        } else {
          out.push_back({id, false, message_after(id, k - 1)});
        }
      }
      waiting = still;
      return out;
    };
    return h;
  }
};

}  // namespace

TEST_CASE("episodes: the KV cache kept between turns gives the tokens and log-probs of generating each turn anew",
          "[rl][episodes]") {
  // The environment's tokens are prefilled onto the kept cache (PagedKvCache's appended
  // rows); the reference runs the whole episode through the model for every token. Also
  // with sliding windows of 4 tokens (the episodes outgrow them) and 2 rows for 3
  // episodes (continuous batching across turns).
  const std::vector<std::vector<int64_t>> prompts = {{5, 17, 3}, {40, 2, 9, 11, 23, 7}, {88}};
  for (const char* name : {"qwen2_untied", "mistral_window"}) {
    for (int64_t rows : {3, 2}) {
      INFO(name << ", " << rows << " rows");
      auto model = load_causal_lm(source_path(std::string("tests/fixtures/models/") + name), at::kFloat);
      SamplingParams p = greedy(4, 64);
      p.max_rows = rows;
      ScriptedHooks script;
      std::vector<at::Generator> none;
      RolloutModel whole(*model);
      const std::vector<Generated> out = generate(whole, prompts, p, none, nullptr, {}, script.hooks());
      for (size_t r = 0; r < prompts.size(); ++r) {
        const Generated ref = reference_episode(*model, prompts[r], static_cast<int64_t>(r), 3, 4);
        CHECK(out[r].tokens == ref.tokens);
        CHECK(out[r].model_tokens == ref.model_tokens);
        REQUIRE(out[r].logprobs.size() == ref.logprobs.size());
        for (size_t k = 0; k < ref.logprobs.size(); ++k) {
          INFO("row " << r << " token " << k);
          CHECK(out[r].logprobs[k] == Approx(ref.logprobs[k]).margin(1e-4));
        }
      }
      CHECK(script.ended.size() == 3);
    }
  }
}

TEST_CASE("episodes: a row waiting for its environment does not hold the others", "[rl][episodes]") {
  // Episode 0's environment answers only after 50 polls; episode 1 runs all its turns and
  // ends meanwhile, and episode 0 then goes on as if nothing had waited.
  auto model = load_causal_lm(source_path("tests/fixtures/models/qwen2_untied"), at::kFloat);
  const std::vector<std::vector<int64_t>> prompts = {{5, 17, 3}, {40, 2, 9}};
  ScriptedHooks script;
  script.slow = 0;
  script.hold = 50;
  std::vector<at::Generator> none;
  RolloutModel whole(*model);
  const std::vector<Generated> out = generate(whole, prompts, greedy(4, 64), none, nullptr, {}, script.hooks());
  CHECK(script.ended == std::vector<int64_t>{1, 0});
  CHECK(script.polls > 50);
  CHECK(out[0].tokens == reference_episode(*model, prompts[0], 0, 3, 4).tokens);
}

namespace {

// An environment that replies from a script, one reply per turn.
class ScriptedEnvironment : public Environment {
 public:
  std::vector<EnvReply> script;  // the n-th turn of an episode gets script[n]
  std::vector<EnvTurn> seen;
  void submit(EnvTurn turn) override {
    seen.push_back(turn);
    pending_.push_back(turn);
  }
  std::vector<EnvReply> poll(double) override {
    std::vector<EnvReply> out;
    for (const EnvTurn& t : pending_) {
      EnvReply r = script.at(static_cast<size_t>(t.turn));
      r.episode = t.episode;
      out.push_back(r);
    }
    pending_.clear();
    return out;
  }

 private:
  std::vector<EnvTurn> pending_;
};

EnvReply message(const std::string& role, const std::string& text) {
  EnvReply r;
  r.role = role;
  r.message = text;
  return r;
}
EnvReply done(double reward) {
  EnvReply r;
  r.done = true;
  r.reward = reward;
  return r;
}

}  // namespace

TEST_CASE("episodes: the environment's messages as the chat template writes them, turn_discount, limits",
          "[rl][episodes]") {
  const std::string folder = source_path("tests/fixtures/models/tiny_chat");
  auto model = load_causal_lm(folder, at::kFloat);
  BpeTokenizer tokenizer(folder + "/tokenizer.json");
  const PromptTemplate tmpl = prompt_template("qwen", tokenizer, folder);
  Prompt prompt;
  prompt.example.prompt = "What is 6 times 7?";
  prompt.example.answer = "42";
  prompt.ids = prompt_tokens(tmpl, tokenizer, prompt.example.prompt);
  RolloutModel whole(*model);
  std::vector<at::Generator> none;
  auto run = [&](ScriptedEnvironment& env, EpisodeSettings settings, int64_t max_new_tokens) {
    EpisodeRunner runner(&env, nullptr, tokenizer, tmpl, tmpl.stop_ids, settings);
    const EpisodeHooks hooks = runner.hooks([&](int64_t) { return &prompt; });
    std::vector<Generated> out =
        generate(whole, {prompt.ids}, greedy(max_new_tokens, settings.context), none, nullptr, {}, hooks);
    runner.complete(0, out[0]);
    return out[0];
  };

  SECTION("a tool message, then the end: discounted once") {
    ScriptedEnvironment env;
    env.script = {message("tool", "56088"), done(1.0)};
    const Generated e = run(env, {4, 0.9, 200}, 5);
    CHECK(e.turns == 2);
    CHECK(e.tool_messages == 1);
    CHECK(e.reward == Approx(0.9));
    CHECK(e.end == EpisodeEnd::kDone);
    // The layout by hand: turn 1 (5 tokens, no end-of-turn: <|im_end|> first), ChatML's
    // tool message as Qwen2.5 writes one and the assistant header, turn 2.
    const std::vector<int64_t> turn1(e.tokens.begin(), e.tokens.begin() + 5);
    const std::vector<int64_t> message = tokenizer.encode(
        "<|im_end|>\n<|im_start|>user\n<tool_response>\n56088\n</tool_response><|im_end|>\n<|im_start|>assistant\n");
    CHECK(message_tokens(tmpl, tokenizer, "tool", "56088", false) == message);
    REQUIRE(e.tokens.size() == 5 + message.size() + 5);
    CHECK(std::vector<int64_t>(e.tokens.begin() + 5, e.tokens.begin() + 5 + static_cast<int64_t>(message.size())) ==
          message);
    std::vector<uint8_t> mask(5, 1);
    mask.insert(mask.end(), message.size(), 0);
    mask.insert(mask.end(), 5, 1);
    CHECK(e.model_tokens == mask);
    for (size_t k = 5; k < 5 + message.size(); ++k) CHECK(e.logprobs[k] == 0.0f);
    // What the environment saw: the prompt as a user message, then the turns.
    REQUIRE(env.seen.size() == 2);
    CHECK(env.seen[0].turn == 0);
    CHECK(env.seen[0].last == tokenizer.decode(turn1));
    CHECK_FALSE(env.seen[0].final);
    const auto messages = nlohmann::json::parse(env.seen[1].messages_json);
    REQUIRE(messages.size() == 4);
    CHECK(messages[0]["content"] == prompt.example.prompt);
    CHECK(messages[1]["role"] == "assistant");
    CHECK(messages[2] == nlohmann::json({{"role", "tool"}, {"content", "56088"}}));
    CHECK(messages[3]["content"] == env.seen[1].last);
  }
  SECTION("max_turns: the last turn is final, and a message after it ends the episode with reward 0") {
    ScriptedEnvironment env;
    env.script = {message("user", "again"), message("user", "again")};
    const Generated e = run(env, {2, 1.0, 200}, 3);
    CHECK(e.turns == 2);
    CHECK(e.reward == 0);
    CHECK(e.end == EpisodeEnd::kTurnLimit);
    REQUIRE(env.seen.size() == 2);
    CHECK(env.seen[1].final);
  }
  SECTION("the context: a message that leaves no room ends the episode") {
    ScriptedEnvironment env;
    env.script = {message("user", std::string(400, 'x'))};
    const int64_t context = static_cast<int64_t>(prompt.ids.size()) + 20;
    const Generated e = run(env, {4, 1.0, context}, 3);
    CHECK(e.turns == 1);
    CHECK(e.end == EpisodeEnd::kContextLimit);
    CHECK(e.tokens.size() == 3);
  }
  SECTION("an environment failure ends the episode with reward 0") {
    ScriptedEnvironment env;
    EnvReply failed;
    failed.failed = true;
    failed.done = true;
    env.script = {failed};
    const Generated e = run(env, {4, 1.0, 200}, 3);
    CHECK(e.end == EpisodeEnd::kEnvFailure);
    CHECK(e.reward == 0);
  }
}

TEST_CASE("environments: the calculator's arithmetic, tool calls and the command protocol", "[rl][episodes][env]") {
  CHECK(*evaluate_arithmetic("123*456") == 56088);
  CHECK(*evaluate_arithmetic(" 2 + 3 * (4 - 1) / 2 ") == Approx(6.5));
  CHECK(*evaluate_arithmetic("-(2+3)%4") == Approx(-1));
  for (const char* bad : {"", "2+", "1/0", "__import__('os')", "2**3", "(1", "1..2", "abs(1)", "1e5"})
    CHECK_FALSE(evaluate_arithmetic(bad).has_value());
  CHECK_FALSE(evaluate_arithmetic(std::string(200, '(') + "1" + std::string(200, ')')).has_value());  // nesting
  CHECK(calculator_value(56088) == "56088");
  CHECK(calculator_value(6.5) == "6.5");
  CHECK(*calculator_call("I need <calc>12*34</calc>") == "12*34");
  CHECK(*calculator_call("<calc>1</calc> <calc>2+2</calc>\n") == "2+2");
  CHECK_FALSE(calculator_call("<calc>1</calc> so 1").has_value());
  CHECK(parse_env_reply(R"({"message": "3", "role": "tool"})")->role == "tool");
  CHECK(parse_env_reply(R"({"message": "hi"})")->role == "user");
  CHECK(parse_env_reply(R"({"done": true, "reward": 0.5})")->reward == 0.5);
  for (const char* bad : {"", "1", "{}", R"({"done": true})", R"({"message": "x", "role": "system"})", "{\"message\": 3}"})
    CHECK_FALSE(parse_env_reply(bad).has_value());
}

TEST_CASE("environments: a command that hangs, crashes or answers garbage ends the episode, counted, and is restarted",
          "[rl][episodes][env][waits]") {
  Rewarder reward("exact_match", 1, 5);
  PromptExample example;
  example.prompt = "1+1=";
  example.answer = "2";
  EnvTurn turn;
  turn.example = &example;
  turn.messages_json = R"([{"role": "user", "content": "1+1="}, {"role": "assistant", "content": "2"}])";
  turn.last = "2";
  auto reply_of = [&](const std::string& command) {
    std::unique_ptr<Environment> env = make_environment("command:" + command, reward, 1, 1.0);
    env->submit(turn);
    std::vector<EnvReply> replies;
    for (int i = 0; i < 10 && replies.empty(); ++i) replies = env->poll(1.0);
    REQUIRE(replies.size() == 1);
    return replies[0];
  };
  // The protocol: the worker reads the turn's JSON and ends the episode with a reward.
  const EnvReply good = reply_of(R"(while read l; do case "$l" in *'"last":"2"'*'"row":{"answer":"2"}'*) )"
                                 R"(echo '{"done": true, "reward": 0.5}';; *) echo '{"message": "no"}';; esac; done)");
  CHECK_FALSE(good.failed);
  CHECK(good.done);
  CHECK(good.reward == 0.5);
  for (const char* bad : {"while read l; do sleep 5; done", "sleep 0.7; read l; exit 3",
                          "while read l; do echo 'not json'; done"}) {
    INFO(bad);
    const EnvReply r = reply_of(bad);
    CHECK(r.failed);
    CHECK(r.done);
  }
  CHECK_THROWS_AS(make_environment("command:no_such_env_program_x", reward, 1, 1.0), ConfigError);
  CHECK_THROWS_WITH(make_environment("command:no_such_env_program_x", reward, 1, 1.0),
                    Catch::Matchers::Contains("option 'env'"));
}

TEST_CASE("environments: scripts/envs/worker.py serves a Python class over the protocol", "[rl][episodes][env][python]") {
  Rewarder reward("exact_match", 1, 5);
  PromptExample example;
  example.prompt = "What is 6 times 7?";
  example.answer = "#### 42";
  auto reply_to = [&](const std::string& last, bool final) {
    std::unique_ptr<Environment> env =
        make_environment("command:" + python_bin() + " " + source_path("scripts/envs/worker.py") + " " +
                             source_path("scripts/envs/retry_env.py") + ":RetryEnv",
                         reward, 1, 30.0);
    EnvTurn turn;
    turn.example = &example;
    turn.messages_json = "[]";
    turn.last = last;
    turn.final = final;
    env->submit(turn);
    std::vector<EnvReply> replies;
    for (int i = 0; i < 60 && replies.empty(); ++i) replies = env->poll(1.0);
    REQUIRE(replies.size() == 1);
    return replies[0];
  };
  const EnvReply right = reply_to("6 * 7 = 42.", false);
  CHECK((right.done && right.reward == 1.0 && !right.failed));
  const EnvReply wrong = reply_to("It is 41", false);
  CHECK((!wrong.done && wrong.role == "user"));
  CHECK_THAT(wrong.message, Catch::Matchers::Contains("try again"));
  const EnvReply last = reply_to("It is 41", true);
  CHECK((last.done && last.reward == 0.0));
}
