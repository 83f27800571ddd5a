// A user's reward command run as a pool of long-lived worker processes (reward_fn:
// `command:<shell command>`). AReaL users write rewards in Python; a worker is such a
// script reading one JSON object per line on stdin and writing one number per line on
// stdout. Loading Python and its packages once per worker, not once per answer, keeps
// scoring fast; several workers score a batch's answers in parallel.
//
// A call that takes longer than the timeout, a worker that dies, or a line that is not
// one finite number scores 0, is counted as a failure, and the worker is replaced by a
// fresh one (its state is unknown after that). The workers' stderr goes to the job's.
// Each worker is a process group of its own, killed as a group (nothing it started
// survives it), and shielded from the job's stop signals (SIGTERM, SIGUSR1 blocked):
// the trainer decides when workers end.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace areal {

class RewardWorkers {
 public:
  // Starts `workers` processes of `/bin/sh -c command`. Throws std::runtime_error when
  // a process cannot be started.
  RewardWorkers(std::string command, int64_t workers, double timeout_seconds);
  // Closes their stdin (a worker that reads to the end exits), waits up to 1 s, then
  // kills every worker's process group.
  ~RewardWorkers();
  RewardWorkers(const RewardWorkers&) = delete;
  RewardWorkers& operator=(const RewardWorkers&) = delete;

  // The reply to each request line (no newline inside), in order; 0 for a failed one,
  // counted in `failures`.
  std::vector<double> score(const std::vector<std::string>& requests, int64_t& failures);

  // Throws std::runtime_error when a worker has exited within `seconds` of its start
  // (a missing script, an import error): such a command would score every answer 0.
  void check_running(double seconds);

  int64_t restarts() const { return restarts_; }

 private:
  struct Worker {
    pid_t pid = -1;
    int fd = -1;          // the worker's stdin and stdout (a socket pair)
    std::string pending;  // what it wrote after its last full line
    int64_t request = -1; // the request it is working on, or -1
    double deadline = 0;
  };
  void start(Worker& w);
  void stop(Worker& w);
  void fail(Worker& w, const std::string& why, std::vector<double>& results, int64_t& failures);

  std::string command_;
  double timeout_seconds_;
  std::vector<Worker> workers_;
  int64_t restarts_ = 0;
  bool warned_ = false;
};

}  // namespace areal
