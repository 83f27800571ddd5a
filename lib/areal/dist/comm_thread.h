// The communication thread of the CPU path: collectives started by the engine run here,
// one after another in the order they were started, while the caller computes. MPI
// moves data only while some thread is inside an MPI call, so a non-blocking
// collective started on the caller's thread would not progress during the caller's
// compute; this thread sits in the wait and drives it. It owns its own duplicate of the
// MPI communicator, so its collectives never interleave with the caller's blocking
// ones on one communicator (MPI requires the same order on every rank per communicator).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace areal {

class CommBackend;
class CollectiveWatchdog;

class CommThread {
 public:
  // `backend`: this thread's own communicator. `watchdog` (may be null) watches every
  // queued collective until it completes.
  CommThread(std::unique_ptr<CommBackend> backend, CollectiveWatchdog* watchdog);
  ~CommThread();  // runs what is queued, then joins
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `collective` and returns at once; calling the returned function waits until
  // it has run and rethrows what it threw.
  std::function<void()> submit(const char* name, int64_t bytes, std::function<void(CommBackend&)> collective);

 private:
  struct Job;
  void loop();

  std::unique_ptr<CommBackend> backend_;
  CollectiveWatchdog* watchdog_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything above exists
};

}  // namespace areal
