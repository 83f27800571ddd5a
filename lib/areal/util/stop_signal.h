// Stop signals: SIGTERM (what schedulers send before they kill a job) and SIGUSR1
// (Slurm's `--signal=USR1@<seconds>` warning before the time limit or a preemption).
// The handler only records the signal; the training loop checks it after every step
// (on all ranks together), writes a recover checkpoint and ends the job with
// kExitStopped (util/error.h). See docs/recovery.md.
#pragma once

namespace areal {

// Installs the handlers (idempotent). Until then both signals end the process.
void install_stop_signal_handlers();

// The stop signal received since the handlers were installed, or 0.
int stop_signal_received();

// A stop signal that another process of the job received (asynchronous RL: a
// generation rank's, relayed to its trainer), taken as if it had come here.
void note_stop_signal(int signal_number);

}  // namespace areal
