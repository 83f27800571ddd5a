#include "areal/rl/async_queue.h"

#include <algorithm>
#include <chrono>
#include <stdexcept>

#include "areal/util/byte_stream.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace areal {

std::vector<char> encode_group(const FinishedGroup& g) {
  ByteWriter w;
  w.put(g.index);
  w.put(g.prompt);
  w.put(g.reward_failures);
  w.put_vector(g.rewards);
  w.put<int64_t>(static_cast<int64_t>(g.answers.size()));
  for (const Generated& a : g.answers) {
    w.put_vector(a.tokens);
    w.put_vector(a.logprobs);
    w.put_vector(a.versions);
    w.put<uint8_t>(a.truncated ? 1 : 0);
    w.put_vector(a.model_tokens);
    w.put(a.turns);
    w.put(a.tool_messages);
    w.put(a.reward);
    w.put(a.env_seconds);
    w.put<uint8_t>(static_cast<uint8_t>(a.end));
    w.put_vector(a.experts);
  }
  return w.take();
}

FinishedGroup decode_group(const std::vector<char>& bytes) {
  ByteReader r(bytes);
  FinishedGroup g;
  g.index = r.get<int64_t>();
  g.prompt = r.get<int64_t>();
  g.reward_failures = r.get<int64_t>();
  g.rewards = r.get_vector<double>();
  const int64_t n = r.get<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    Generated& a = g.answers.emplace_back();
    a.tokens = r.get_vector<int64_t>();
    a.logprobs = r.get_vector<float>();
    a.versions = r.get_vector<int64_t>();
    a.truncated = r.get<uint8_t>() != 0;
    a.model_tokens = r.get_vector<uint8_t>();
    a.turns = r.get<int64_t>();
    a.tool_messages = r.get<int64_t>();
    a.reward = r.get<double>();
    a.env_seconds = r.get<double>();
    a.end = static_cast<EpisodeEnd>(r.get<uint8_t>());
    a.experts = r.get_vector<int16_t>();
  }
  if (!r.done() || g.rewards.size() != g.answers.size())
    throw std::runtime_error(cat("a finished group's message (group ", g.index, ") is malformed"));
  return g;
}

bool StalenessRule::may_start(int64_t group, int64_t version) const {
  if (group >= (eta + version + 1) * batch) return false;
  // The groups of the step the trainers collect (version v's) never count as waiting:
  // the inbox takes them as they come (AReaL's consumer drains its queue likewise), so a
  // queue_size below the batch bounds the run-ahead and cannot stall the step.
  return queue_size <= 0 || group < std::max(version * batch + queue_size, (version + 1) * batch);
}

std::vector<char> encode_stop(int signal_number) {
  ByteWriter w;
  w.put<int64_t>(signal_number);
  return w.take();
}

int take_stop_notes(Mailbox& mail) {
  int signal_number = 0;
  while (std::optional<Message> m = mail.poll(kTagStop)) {
    ByteReader r(m->bytes);
    signal_number = static_cast<int>(r.get<int64_t>());
  }
  return signal_number;
}

std::vector<char> encode_eval(const EvalScore& score) {
  ByteWriter w;
  w.put(score.version);
  w.put(score.accuracy);
  return w.take();
}

EvalScore decode_eval(const std::vector<char>& bytes) {
  ByteReader r(bytes);
  EvalScore s;
  s.version = r.get<int64_t>();
  s.accuracy = r.get<double>();
  return s;
}

std::vector<char> encode_done() {
  FinishedGroup done;
  done.index = -1;
  return encode_group(done);
}

GroupInbox::GroupInbox(Mailbox& mail, int64_t batch, int train_rank, int trainers, int senders)
    : mail_(mail), batch_(batch), train_rank_(train_rank), trainers_(trainers), senders_(senders) {}

void GroupInbox::drain() {
  Napper napper;
  while (done_ < senders_) {
    take_arrived();
    napper.nap();
  }
}

void GroupInbox::take_arrived() {
  while (std::optional<Message> m = mail_.poll(kTagGroup)) {
    FinishedGroup g = decode_group(m->bytes);
    if (g.index < 0) {
      ++done_;
      continue;
    }
    if ((g.index % batch_) % trainers_ != train_rank_)
      throw std::runtime_error(cat("group ", g.index, " came to training rank ", train_rank_, ", not its trainer"));
    held_.emplace(g.index, std::move(g));
  }
}

std::vector<FinishedGroup> GroupInbox::take_step(int64_t step, double& waited_seconds) {
  const auto start = std::chrono::steady_clock::now();
  auto next_note = start + std::chrono::minutes(1);
  std::vector<int64_t> wanted;
  for (int64_t p = train_rank_; p < batch_; p += trainers_) wanted.push_back(step * batch_ + p);
  Napper napper;
  for (;;) {
    take_arrived();
    size_t present = 0;
    for (int64_t g : wanted) present += held_.count(g);
    if (present == wanted.size()) break;
    const auto now = std::chrono::steady_clock::now();
    if (now >= next_note) {
      log::info(cat("step ", step + 1, ": waiting for generation (", present, " of ", wanted.size(),
                    " groups here, ", std::chrono::duration_cast<std::chrono::seconds>(now - start).count(), " s)"));
      next_note = now + std::chrono::minutes(1);
    }
    napper.nap();
  }
  waited_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::vector<FinishedGroup> out;
  for (int64_t g : wanted) {
    out.push_back(std::move(held_.at(g)));
    held_.erase(g);
  }
  return out;
}

}  // namespace areal
