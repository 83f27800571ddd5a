#include "areal/dist/collective_watchdog.h"

#include <pthread.h>

#include <algorithm>
#include <cstdlib>

#include "areal/dist/bootstrap.h"
#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/memory.h"
#include "areal/util/strings.h"

namespace areal {
namespace {

double cpu_seconds(clockid_t clock) {
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The CPU clock of the calling thread (looked up once per thread).
clockid_t this_thread_clock() {
  thread_local clockid_t clock = [] {
    clockid_t id = CLOCK_THREAD_CPUTIME_ID;
    pthread_getcpuclockid(pthread_self(), &id);
    return id;
  }();
  return clock;
}

}  // namespace

CollectiveWatchdog::CollectiveWatchdog(double timeout_seconds)
    : timeout_seconds_(timeout_seconds), thread_([this] { watch_loop(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

CollectiveWatchdog::Watch::Watch(CollectiveWatchdog* dog, const char* name, int64_t bytes) : dog_(dog) {
  if (!dog_) return;
  std::lock_guard<std::mutex> lock(dog_->mutex_);
  dog_->in_flight_ = name;
  dog_->in_flight_bytes_ = bytes;
  dog_->since_ = std::chrono::steady_clock::now();
  dog_->waiter_clock_ = this_thread_clock();
  dog_->waiter_cpu_start_ = cpu_seconds(dog_->waiter_clock_);
  ++dog_->count_;
}

CollectiveWatchdog::Watch::~Watch() {
  if (!dog_) return;
  std::lock_guard<std::mutex> lock(dog_->mutex_);
  dog_->in_flight_ = nullptr;
}

void CollectiveWatchdog::watch_queued(const char* name, int64_t bytes, std::function<bool()> done,
                                      const char* where) {
  std::lock_guard<std::mutex> lock(mutex_);
  while (!queued_.empty() && queued_.front().done()) queued_.pop_front();  // keeps the list short
  queued_.push_back({name, bytes, count_, activity_, std::chrono::steady_clock::now(), std::move(done), where});
}

void CollectiveWatchdog::set_activity(std::string activity) {
  std::lock_guard<std::mutex> lock(mutex_);
  activity_ = std::move(activity);
}

void CollectiveWatchdog::watch_loop() {
  // Checks about once a second (more often for a short timeout, as in tests).
  const auto period = std::chrono::duration<double>(std::min(1.0, timeout_seconds_ / 4));
  std::unique_lock<std::mutex> lock(mutex_);
  auto seconds_since = [](std::chrono::steady_clock::time_point t) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
  };
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    while (!queued_.empty() && queued_.front().done()) queued_.pop_front();
    if (!queued_.empty() && seconds_since(queued_.front().since) >= timeout_seconds_) {
      const Queued& q = queued_.front();
      end_job(q.name, q.bytes, q.number, q.activity, seconds_since(q.since), q.where);
    }
    if (in_flight_ && seconds_since(since_) >= timeout_seconds_)
      end_job(in_flight_, in_flight_bytes_, count_, activity_, seconds_since(since_),
              cat("it used ", format_fixed(cpu_seconds(waiter_clock_) - waiter_cpu_start_, 2),
                  " s of CPU meanwhile"));
  }
}

void CollectiveWatchdog::end_job(const char* name, int64_t bytes, int64_t number, const std::string& activity,
                                 double waited, const std::string& note) {
  log::error(cat("collective ", name, " (", format_bytes(bytes), ", collective #", number, " of this rank, during ",
                 activity, ") has not completed after ", format_fixed(waited, 0), " s (cluster.collective_timeout = ",
                 format_fixed(timeout_seconds_, 0), "; ", note, "): a rank stopped or is far behind; ending the job. ",
                 "The ranks that print no such line are the ones that never arrived."));
  run_abort_hooks();         // NCCL communicators: their kernels stop waiting
  std::_Exit(kExitRuntimeError);  // mpirun sees a rank fail and ends the others
}

}  // namespace areal
