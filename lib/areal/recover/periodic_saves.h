// Hugging Face saves during training (saver.freq_steps, freq_epochs, freq_secs), each in
// its own directory, AReaL's layout:
//
//   <run dir>/checkpoints/epoch<E>epochstep<S>globalstep<G>
//
// E, S and G count from 0 and name the step just done (the save after the 4th step of
// the 2nd epoch, 10 steps per epoch: epoch1epochstep3globalstep13). The newest
// saver.keep_last are kept (0: all). The final save, after the last step, is
// <run dir>/checkpoint, as without periodic saves.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "areal/config/config.h"
#include "areal/dist/communicator.h"
#include "areal/fsdp/policy.h"

namespace areal {

std::string periodic_save_name(int64_t epoch, int64_t epoch_step, int64_t global_step);

// AReaL's freq_steps / freq_epochs / freq_secs rule (saver, evaluator): due after step
// `steps_done` (from 1) when it is a multiple of freq_steps or ends every freq_epochs-th
// epoch, or freq_secs have passed since `last`. Each 0 is off. Clocks differ between
// ranks: with freq_secs they decide together (one small all-reduce), so it is
// collective then.
bool periodic_due(int64_t steps_done, int64_t steps_per_epoch, int64_t freq_steps, int64_t freq_epochs,
                  int64_t freq_secs, std::chrono::steady_clock::time_point last, Communicator& comm);

class PeriodicSaver {
 public:
  PeriodicSaver(const Config& cfg, int64_t steps_per_epoch, Communicator& comm);

  // Called by every rank after step `steps_done` (counted from 1); saves when one is
  // due (never after the last step). Collective; with saver.freq_secs one small
  // all-reduce every step, so that all ranks agree on the time. Returns the directory
  // written, or "".
  std::string after_step(int64_t steps_done, bool last, const Policy& policy);

 private:
  void remove_old_saves(const std::string& root) const;

  const Config& cfg_;
  int64_t steps_per_epoch_;
  Communicator& comm_;
  std::chrono::steady_clock::time_point last_save_;
};

}  // namespace areal
