// Weight sync for asynchronous RL: after each optimizer step the trainers send the new
// weights, tagged with their version (the number of optimizer steps in them), to the
// generation ranks, one unit at a time, straight from the FSDP shards:
//
//   trainers    for each unit: gather it whole (Policy::unit_weights, collective over
//               the training ranks), send it to this rank's generation ranks, drop it
//   generation  take each unit as it comes, keep this rank's tensor-parallel slice of
//               it, drop the rest (RolloutModel::replace)
//
// So no rank ever holds more than its slices plus one unit. Training rank k serves the
// generation ranks g with g % trainers == k. A message of version -1 means the
// trainers stopped (a stop signal): the generation side stops too.
//
// A version starts with its header; the generation rank answers "ready" when it takes
// it (it may be evaluating, for minutes), and the trainers agree that all their
// generation ranks are ready (an unwatched barrier) before the first unit's collective
// gather: else the trainers that serve nobody would wait in that watched collective for
// the one blocked in a send, and the watchdog would end the job as if a rank stopped.
#pragma once

#include <cstdint>
#include <vector>

#include "areal/dist/mailbox.h"
#include "areal/fsdp/policy.h"
#include "areal/rollout/rollout_model.h"

namespace areal {

constexpr int kTagWeights = 21;
constexpr int kTagWeightsReady = 25;  // generation -> its trainer: it takes the version now

// Trainer side; collective over the policy's ranks. `to`: this rank's generation ranks.
void send_weights(Policy& policy, Mailbox& mail, const std::vector<int>& to, int64_t version,
                  at::ScalarType dtype);
// Tells `to` that the trainers stopped.
void send_stop(Mailbox& mail, const std::vector<int>& to);

// Generation side: whether a version from `source` (the serving training rank) waits.
bool weights_waiting(Mailbox& mail, int source);
// Receives the waiting version into `model` in place and returns its number; throws
// StopRequested on the stop notice.
int64_t receive_weights(Mailbox& mail, int source, RolloutModel& model);
// The first version, as a new model of this rank's slices (`group`: its
// tensor-parallel group, nullptr at t = 1); `version` receives its number.
RolloutModel receive_first_weights(Mailbox& mail, int source, const ModelConfig& config, Communicator* group,
                                   at::ScalarType dtype, const at::Device& device, int64_t& version,
                                   bool whole_experts = false);

}  // namespace areal
