// Ends the job when a collective does not complete in time: a rank that stopped
// (SIGSTOP, a hung device, a deadlock) would otherwise keep every other rank waiting
// forever. A background thread looks at the collective in flight about once a second;
// past the timeout it logs one line on each rank that waits (the collective, its
// size, what the job was doing, how long) and exits that rank, so mpirun ends the job.
// The ranks that do not print that line are the ones that never arrived. The line also
// says how much CPU the waiting thread used meanwhile: waiting does not spin a core
// (mpi_backend.cpp's wait_all naps between polls once a transfer is overdue).
//
// Blocking calls (MPI) are watched while they run. NCCL calls return once their work is
// queued on a stream; that work is watched through watch_queued until its CUDA event
// completes, and past the timeout the NCCL communicators are aborted (the abort hooks,
// bootstrap.h) before the rank exits.
#pragma once

#include <time.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace areal {

class CollectiveWatchdog {
 public:
  explicit CollectiveWatchdog(double timeout_seconds);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  // Marks one collective in flight for its lifetime.
  class Watch {
   public:
    Watch(CollectiveWatchdog* dog, const char* name, int64_t bytes);
    ~Watch();

   private:
    CollectiveWatchdog* dog_;
  };

  // Work that a collective queued and that has not run yet (on a device stream for
  // NCCL, on the communication thread for started MPI collectives): `done` (a CUDA
  // event's query, a flag) is polled until it returns true. Queued work completes in
  // order, so only the oldest pending entry can be overdue. `where` goes into the
  // timeout message.
  void watch_queued(const char* name, int64_t bytes, std::function<bool()> done,
                    const char* where = "queued on the GPU");

  // What the job is doing ("rl step 12"), named in the timeout message.
  void set_activity(std::string activity);

 private:
  void watch_loop();
  [[noreturn]] void end_job(const char* name, int64_t bytes, int64_t number, const std::string& activity,
                            double waited, const std::string& note);

  struct Queued {
    const char* name;
    int64_t bytes;
    int64_t number;  // which collective of this rank
    std::string activity;
    std::chrono::steady_clock::time_point since;
    std::function<bool()> done;
    const char* where;
  };

  const double timeout_seconds_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  const char* in_flight_ = nullptr;  // the collective's name, or none
  int64_t in_flight_bytes_ = 0;
  int64_t count_ = 0;  // collectives so far: the one in flight is number count_
  std::chrono::steady_clock::time_point since_;
  clockid_t waiter_clock_{};     // the CPU clock of the thread in the collective
  double waiter_cpu_start_ = 0;  // its CPU seconds when the collective began
  std::string activity_ = "the staged init";
  std::deque<Queued> queued_;  // device work not known to be done, oldest first
  std::thread thread_;
};

}  // namespace areal
