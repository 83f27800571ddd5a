#include "areal/rl/episodes.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "areal/util/strings.h"

namespace areal {
namespace {

using json = nlohmann::json;

std::string message_json(const std::string& role, const std::string& content) {
  return json{{"role", role}, {"content", content}}.dump(-1, ' ', false, json::error_handler_t::replace);
}

// Decisions travel as int64 words: doubles bit for bit, strings are not needed (the
// tokens are what the other ranks append).
void put_double(std::vector<int64_t>& w, double v) {
  int64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  w.push_back(bits);
}
double get_double(const int64_t*& p) {
  double v;
  std::memcpy(&v, p++, sizeof v);
  return v;
}

}  // namespace

EpisodeRunner::EpisodeRunner(Environment* env, Communicator* group, const Tokenizer& tokenizer,
                             const PromptTemplate& tmpl, std::vector<int64_t> stop_ids, EpisodeSettings settings)
    : env_(env), group_(group), tokenizer_(tokenizer), tmpl_(tmpl), stop_ids_(std::move(stop_ids)), settings_(settings) {
  if ((group_ == nullptr || group_->rank() == 0) != (env_ != nullptr))
    throw std::invalid_argument("EpisodeRunner: the group's first rank, and only it, needs the environment");
}

EpisodeHooks EpisodeRunner::hooks(std::function<const Prompt*(int64_t id)> prompt_of) {
  states_.clear();
  prompt_of_ = std::move(prompt_of);
  EpisodeHooks h;
  h.turn_ended = [this](int64_t id, const Generated& episode) { turn_ended(id, episode); };
  h.replies = [this](bool wait) { return replies(wait); };
  return h;
}

void EpisodeRunner::turn_ended(int64_t id, const Generated& episode) {
  State& st = states_[id];
  const Prompt& prompt = *prompt_of_(id);
  ++st.turns;
  st.length = static_cast<int64_t>(prompt.ids.size() + episode.tokens.size());
  st.closed = static_cast<int64_t>(episode.tokens.size()) > st.turn_start &&
              std::find(stop_ids_.begin(), stop_ids_.end(), episode.tokens.back()) != stop_ids_.end();
  // No further turn: the last allowed, or no room for a message and a token after it.
  st.final = st.turns >= settings_.max_turns || st.length + 2 > settings_.context;
  if (!env_) return;  // the group's other ranks follow the first rank's decisions
  const std::string text =
      tokenizer_.decode({episode.tokens.begin() + st.turn_start, episode.tokens.end()});
  st.messages.push_back(message_json("assistant", text));
  EnvTurn t;
  t.episode = id;
  t.example = &prompt.example;
  std::string messages = prompt.example.messages_json;
  if (messages.empty()) messages = "[" + message_json("user", prompt.example.prompt) + "]";
  messages.pop_back();  // the prompt's list, then this episode's messages
  for (const std::string& m : st.messages) messages += (messages.size() > 1 ? "," : "") + m;
  t.messages_json = messages + "]";
  t.last = text;
  t.turn = st.turns - 1;
  t.final = st.final;
  env_->submit(std::move(t));
}

EpisodeRunner::Decision EpisodeRunner::decide(const EnvReply& reply) {
  Decision d;
  d.id = reply.episode;
  d.seconds = reply.seconds;
  const auto found = states_.find(reply.episode);
  if (found == states_.end()) throw std::logic_error(cat("environment: a reply for unknown episode ", reply.episode));
  const State& st = found->second;
  d.end = true;
  if (reply.failed) {
    d.how = EpisodeEnd::kEnvFailure;
  } else if (reply.done) {
    d.reward = reply.reward * std::pow(settings_.turn_discount, static_cast<double>(st.turns - 1));
  } else if (st.final) {  // a message where no turn can follow: the limit ends it, reward 0
    d.how = st.turns >= settings_.max_turns ? EpisodeEnd::kTurnLimit : EpisodeEnd::kContextLimit;
  } else {
    d.tokens = message_tokens(tmpl_, tokenizer_, reply.role, reply.message, st.closed);
    if (st.length + static_cast<int64_t>(d.tokens.size()) + 1 > settings_.context || d.tokens.empty()) {
      d.how = EpisodeEnd::kContextLimit;
      d.tokens.clear();
    } else {
      d.end = false;
      d.role = reply.role;
      d.content = reply.message;
    }
  }
  return d;
}

void EpisodeRunner::share(std::vector<Decision>& decisions) {
  if (!group_) return;
  std::vector<int64_t> words;
  if (env_) {
    words.push_back(static_cast<int64_t>(decisions.size()));
    for (const Decision& d : decisions) {
      words.insert(words.end(), {d.id, d.end ? 1 : 0, static_cast<int64_t>(d.how), d.role == "tool" ? 1 : 0});
      put_double(words, d.reward);
      put_double(words, d.seconds);
      words.push_back(static_cast<int64_t>(d.tokens.size()));
      words.insert(words.end(), d.tokens.begin(), d.tokens.end());
    }
  }
  at::Tensor size = at::tensor({static_cast<int64_t>(words.size())}, at::kLong);
  group_->broadcast(size, 0);
  at::Tensor data = env_ ? at::tensor(words, at::kLong) : at::empty({size.item<int64_t>()}, at::kLong);
  group_->broadcast(data, 0);
  if (env_) return;
  const int64_t* p = data.data_ptr<int64_t>();
  decisions.resize(static_cast<size_t>(*p++));
  for (Decision& d : decisions) {
    d.id = *p++;
    d.end = *p++ != 0;
    d.how = static_cast<EpisodeEnd>(*p++);
    d.role = *p++ ? "tool" : "user";
    d.reward = get_double(p);
    d.seconds = get_double(p);
    const int64_t n = *p++;
    d.tokens.assign(p, p + n);
    p += n;
  }
}

std::vector<TurnReply> EpisodeRunner::replies(bool wait) {
  std::vector<Decision> decisions;
  if (env_) {
    std::vector<EnvReply> in = env_->poll(0);
    while (wait && in.empty()) in = env_->poll(1.0);
    for (const EnvReply& r : in) decisions.push_back(decide(r));
  }
  share(decisions);
  std::vector<TurnReply> out;
  for (Decision& d : decisions) {
    State& st = states_.at(d.id);
    st.env_seconds += d.seconds;
    if (d.end) {
      st.reward = d.reward;
      st.end = d.how;
    } else {
      if (env_) st.messages.push_back(message_json(d.role, d.content));
      st.tool_messages += d.role == "tool";
      st.turn_start = st.length - static_cast<int64_t>(prompt_of_(d.id)->ids.size()) +
                      static_cast<int64_t>(d.tokens.size());
    }
    out.push_back({d.id, d.end, std::move(d.tokens)});
  }
  return out;
}

void EpisodeRunner::complete(int64_t id, Generated& episode) {
  const auto found = states_.find(id);
  if (found == states_.end()) throw std::logic_error(cat("episode ", id, " finished without a turn"));
  const State& st = found->second;
  episode.turns = st.turns;
  episode.tool_messages = st.tool_messages;
  episode.reward = st.reward;
  episode.env_seconds = st.env_seconds;
  episode.end = st.end;
  states_.erase(found);
}

}  // namespace areal
