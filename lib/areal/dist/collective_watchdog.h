// Ends the job when a collective does not complete in time: a rank that stopped
// (SIGSTOP, a hung device, a deadlock) would otherwise keep every other rank waiting
// forever. A background thread looks at the collective in flight about once a second;
// past the timeout it logs one line on each rank that waits (the collective, its
// size, what the job was doing, how long) and exits that rank, so mpirun ends the job.
// The ranks that do not print that line are the ones that never arrived.
//
// It watches the calls, so it covers the MPI (CPU) path fully; NCCL work is queued on a
// stream and returns at once, so a stuck NCCL collective is seen at the next CPU
// collective or synchronization only.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
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

  // What the job is doing ("rl step 12"), named in the timeout message.
  void set_activity(std::string activity);

 private:
  void watch_loop();

  const double timeout_seconds_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  const char* in_flight_ = nullptr;  // the collective's name, or none
  int64_t in_flight_bytes_ = 0;
  int64_t count_ = 0;  // collectives so far: the one in flight is number count_
  std::chrono::steady_clock::time_point since_;
  std::string activity_ = "the staged init";
  std::thread thread_;
};

}  // namespace areal
