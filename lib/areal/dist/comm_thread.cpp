#include "areal/dist/comm_thread.h"

#include <atomic>
#include <exception>

#include "areal/dist/collective_watchdog.h"
#include "areal/dist/comm_backend.h"

namespace areal {

struct CommThread::Job {
  std::function<void(CommBackend&)> collective;
  std::atomic<bool> done{false};  // also polled by the watchdog's thread
  std::exception_ptr error;
  std::mutex mutex;
  std::condition_variable finished;
};

CommThread::CommThread(std::unique_ptr<CommBackend> backend, CollectiveWatchdog* watchdog)
    : backend_(std::move(backend)), watchdog_(watchdog), thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

std::function<void()> CommThread::submit(const char* name, int64_t bytes,
                                         std::function<void(CommBackend&)> collective) {
  auto job = std::make_shared<Job>();
  job->collective = std::move(collective);
  if (watchdog_)
    watchdog_->watch_queued(name, bytes, [job] { return job->done.load(); }, "started on the communication thread");
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(job);
  }
  wake_.notify_one();
  return [job] {
    std::unique_lock<std::mutex> lock(job->mutex);
    job->finished.wait(lock, [&] { return job->done.load(); });
    if (job->error) std::rethrow_exception(job->error);
  };
}

void CommThread::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued has run
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      job->collective(*backend_);
    } catch (...) {
      job->error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(job->mutex);
      job->done = true;
    }
    job->finished.notify_all();
  }
}

}  // namespace areal
