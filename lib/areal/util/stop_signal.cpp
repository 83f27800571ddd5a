#include "areal/util/stop_signal.h"

#include <signal.h>

#include <atomic>

namespace areal {
namespace {

std::atomic<int> received{0};

void record(int signal_number) { received.store(signal_number); }  // async-signal-safe: lock-free store

}  // namespace

void install_stop_signal_handlers() {
  struct sigaction action = {};
  action.sa_handler = record;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted reads and waits go on
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGUSR1, &action, nullptr);
}

int stop_signal_received() { return received.load(); }

void note_stop_signal(int signal_number) {
  if (signal_number != 0) received.store(signal_number);
}

}  // namespace areal
