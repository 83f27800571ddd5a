// A user's program run as a pool of long-lived worker processes: reward commands
// (reward_fn: `command:...`, one number per answer) and environments (env:
// `command:...`, one JSON reply per episode turn). AReaL users write these in Python; a
// worker is such a script reading one line per request on stdin and writing one line
// per reply on stdout. Loading Python and its packages once per worker, not once per
// call, keeps calls fast; several workers answer in parallel.
//
// A call that takes longer than the timeout, a worker that dies, or a reply that is not
// valid (the caller's rule) fails: it comes back with no reply, is counted, and the
// worker is replaced by a fresh one (its state is unknown after that). The workers'
// stderr goes to the job's. Each worker is a process group of its own, killed as a
// group (nothing it started survives it), and shielded from the job's stop signals
// (SIGTERM, SIGUSR1 blocked): the trainer decides when workers end.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace areal {

class WorkerPool {
 public:
  // Starts `workers` processes of `/bin/sh -c command`; `what` names the pool in
  // messages ("reward command"); `valid` tells a reply line from garbage. Throws
  // std::runtime_error when a process cannot be started.
  WorkerPool(std::string what, std::string command, int64_t workers, double timeout_seconds,
             std::function<bool(const std::string& line)> valid);
  // Closes their stdin (a worker that reads to the end exits), waits up to 1 s, then
  // kills every worker's process group.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  struct Reply {
    int64_t tag = 0;
    std::optional<std::string> line;  // nothing: the call failed (timeout, crash, garbage)
    double seconds = 0;               // from submit to reply
  };
  // Queues a request (one line, no newline inside); its reply carries `tag`.
  void submit(int64_t tag, std::string request);
  // The replies that came in; waits up to `wait_seconds` for the first while calls are
  // out (0: only what is there).
  std::vector<Reply> poll(double wait_seconds);
  // Every request's reply, in order: submit them all and wait for each.
  std::vector<std::optional<std::string>> call_all(const std::vector<std::string>& requests);
  int64_t outstanding() const { return static_cast<int64_t>(queue_.size()) + busy_; }

  // Throws std::runtime_error when a worker has exited within `seconds` of its start
  // (a missing script, an import error): such a command would fail every call.
  void check_running(double seconds);

  int64_t restarts() const { return restarts_; }

 private:
  struct Worker {
    pid_t pid = -1;
    int fd = -1;          // the worker's stdin and stdout (a socket pair)
    std::string pending;  // what it wrote after its last full line
    int64_t tag = -1;     // the request it is working on
    bool working = false;
    double submitted = 0, deadline = 0;
  };
  struct Request {
    int64_t tag;
    std::string line;
    double submitted;
  };
  void start(Worker& w);
  void stop(Worker& w);
  // The worker's current call fails; the worker is replaced.
  void fail(Worker& w, const std::string& why, std::vector<Reply>& out);
  void hand_out(std::vector<Reply>& out);

  std::string what_, command_;
  double timeout_seconds_;
  std::function<bool(const std::string&)> valid_;
  std::vector<Worker> workers_;
  std::deque<Request> queue_;
  int64_t busy_ = 0;
  int64_t restarts_ = 0;
  bool warned_ = false;
};

}  // namespace areal
