// The queue of asynchronous RL between the generation ranks and the trainers: what a
// finished group is on the wire, which trainer takes it, when generation may start a
// group (the staleness bound), and the trainer's side that collects a step's groups.
//
// Groups are numbered in the run's order: group g is position g % B of step g / B's
// batch (B = train_dataset.batch_size prompts). Replica d of the D generation replicas
// generates the positions p with p % D == d; training rank k trains on the positions
// with p % T == k (T trainers), as in the synchronous loop.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "areal/dist/mailbox.h"
#include "areal/rollout/generation.h"

namespace areal {

constexpr int kTagGroup = 22;  // a finished group, generation -> its trainer
constexpr int kTagEval = 23;   // a held-out score, generation replica 0 -> the first trainer
constexpr int kTagStop = 24;   // a stop signal a generation rank received, -> its trainer
constexpr int kEvalSource = 0;  // generation replica 0's first rank, which evaluates: world rank 0

// One prompt's answers, scored on the generation side.
struct FinishedGroup {
  int64_t index = 0;   // the group's number in the run (above)
  int64_t prompt = 0;  // its row of the training data
  std::vector<Generated> answers;  // with the weight version of every token
  std::vector<double> rewards;     // raw rewards, one per answer
  int64_t reward_failures = 0;
};
std::vector<char> encode_group(const FinishedGroup& group);
// A generation replica's last message to each trainer: it sends nothing more.
std::vector<char> encode_done();
FinishedGroup decode_group(const std::vector<char>& bytes);

// AReaL's rule for starting a rollout (max_head_offpolicyness, queue_size): group g
// may start with weights of version v when its step g / B is at most eta versions
// ahead of v (g < (eta + v + 1) B), and, with a queue_size, when fewer than queue_size
// groups would wait beyond the v B the trainers have taken (g < v B + queue_size); the
// groups of step v itself, which the trainers are collecting, may always start (else a
// queue_size below B would stall the run).
// Every token of a group is then at most eta versions behind the weights it trains.
struct StalenessRule {
  int64_t batch = 1, eta = 0, queue_size = 0;
  bool may_start(int64_t group, int64_t version) const;
};

// A stop signal (SIGTERM, SIGUSR1) on the wire: a generation rank relays the one it
// received to its trainer, which takes it (note_stop_signal) before its stop check.
std::vector<char> encode_stop(int signal_number);
// Takes the relayed stop signals that arrived; returns the last one's number, or 0.
int take_stop_notes(Mailbox& mail);

// A held-out score of the weights of `version`.
struct EvalScore {
  int64_t version = 0;
  double accuracy = 0;
};
std::vector<char> encode_eval(const EvalScore& score);
EvalScore decode_eval(const std::vector<char>& bytes);

// The trainer's end: takes this rank's groups of a step, holding any that arrive early.
class GroupInbox {
 public:
  // `senders`: the generation replicas (each one's first rank sends its groups).
  GroupInbox(Mailbox& mail, int64_t batch, int train_rank, int trainers, int senders);
  // This rank's groups of `step` (positions p % trainers == train_rank, in position
  // order); waits for the missing ones. `waited_seconds` receives the time it waited.
  std::vector<FinishedGroup> take_step(int64_t step, double& waited_seconds);
  // Groups received and not yet taken (the queue's length on this rank).
  size_t held() const { return held_.size(); }
  // At the end (or a stop): takes everything until every sender said it is done, so
  // that no message is left in flight.
  void drain();

 private:
  void take_arrived();
  Mailbox& mail_;
  int64_t batch_;
  int train_rank_, trainers_, senders_, done_ = 0;
  std::map<int64_t, FinishedGroup> held_;
};

}  // namespace areal
