#include "areal/dist/collective_watchdog.h"

#include <algorithm>
#include <cstdlib>

#include "areal/util/error.h"
#include "areal/util/log.h"
#include "areal/util/memory.h"
#include "areal/util/strings.h"

namespace areal {

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
  ++dog_->count_;
}

CollectiveWatchdog::Watch::~Watch() {
  if (!dog_) return;
  std::lock_guard<std::mutex> lock(dog_->mutex_);
  dog_->in_flight_ = nullptr;
}

void CollectiveWatchdog::set_activity(std::string activity) {
  std::lock_guard<std::mutex> lock(mutex_);
  activity_ = std::move(activity);
}

void CollectiveWatchdog::watch_loop() {
  // Checks about once a second (more often for a short timeout, as in tests).
  const auto period = std::chrono::duration<double>(std::min(1.0, timeout_seconds_ / 4));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period, [this] { return stopping_; })) {
    if (!in_flight_) continue;
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - since_).count();
    if (waited < timeout_seconds_) continue;
    log::error(cat("collective ", in_flight_, " (", format_bytes(in_flight_bytes_), ", collective #", count_,
                   " of this rank, during ", activity_, ") has not completed after ", format_fixed(waited, 0),
                   " s (cluster.collective_timeout = ", format_fixed(timeout_seconds_, 0),
                   "): a rank stopped or is far behind; ending the job. The ranks that print no such line are the "
                   "ones that never arrived."));
    std::_Exit(kExitRuntimeError);  // mpirun sees a rank fail and ends the others
  }
}

}  // namespace areal
