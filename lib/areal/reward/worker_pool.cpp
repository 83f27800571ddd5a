#include "areal/reward/worker_pool.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <stdexcept>
#include <thread>

#include "areal/util/log.h"
#include "areal/util/strings.h"

extern char** environ;

namespace areal {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Writes all of `data`; false when the worker is gone. MSG_NOSIGNAL: a dead worker
// gives EPIPE here, not a SIGPIPE that would end the job.
bool send_all(int fd, const std::string& data) {
  size_t sent = 0;
  while (sent < data.size()) {
    const ssize_t n = ::send(fd, data.data() + sent, data.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

}  // namespace

WorkerPool::WorkerPool(std::string what, std::string command, int64_t workers, double timeout_seconds,
                       std::function<bool(const std::string&)> valid)
    : what_(std::move(what)),
      command_(std::move(command)),
      timeout_seconds_(timeout_seconds),
      valid_(std::move(valid)),
      workers_(static_cast<size_t>(workers)) {
  for (Worker& w : workers_) start(w);
}

WorkerPool::~WorkerPool() {
  for (Worker& w : workers_) {
    if (w.fd >= 0) ::shutdown(w.fd, SHUT_WR);  // end of input: a well-behaved worker exits
  }
  const double grace_end = now_seconds() + 1.0;
  for (Worker& w : workers_) {
    // WNOWAIT: an exited worker stays unreaped, so its process group id cannot be
    // reused before stop() kills what the worker left running in it.
    siginfo_t info{};
    while (w.pid > 0 && now_seconds() < grace_end) {
      info.si_pid = 0;
      if (::waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid == w.pid)
        break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    stop(w);
  }
}

void WorkerPool::check_running(double seconds) {
  const double end = now_seconds() + seconds;
  do {
    for (Worker& w : workers_) {
      int status = 0;
      if (w.pid > 0 && ::waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.pid = -1;
        const std::string how = WIFEXITED(status) ? cat("exited with status ", WEXITSTATUS(status))
                                                  : cat("was killed by signal ", WTERMSIG(status));
        throw std::runtime_error(cat(what_, " '", command_, "' ", how, " right after it started, before "
                                     "reading a request (its error output is above)"));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (now_seconds() < end);
}

void WorkerPool::start(Worker& w) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    throw std::runtime_error(cat(what_, ": socketpair failed: ", std::strerror(errno)));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pair[1], STDIN_FILENO);   // dup2 clears CLOEXEC on the copy
  posix_spawn_file_actions_adddup2(&actions, pair[1], STDOUT_FILENO);
  // A process group of its own: a timed-out worker is killed with everything it started
  // (a compound command's grandchildren), and the signals a launcher sends to the job's
  // process groups (Slurm's SIGUSR1/SIGTERM before the end of a step) do not reach it;
  // those two are blocked too, in case one is sent to every process. The trainer ends
  // its workers itself.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setpgroup(&attr, 0);
  sigset_t blocked;
  sigemptyset(&blocked);
  sigaddset(&blocked, SIGTERM);
  sigaddset(&blocked, SIGUSR1);
  posix_spawnattr_setsigmask(&attr, &blocked);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  const char* argv[] = {"/bin/sh", "-c", command_.c_str(), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, "/bin/sh", &actions, &attr, const_cast<char* const*>(argv), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pair[1]);
  if (rc != 0) {
    ::close(pair[0]);
    throw std::runtime_error(cat(what_, " '", command_, "' could not be started: ", std::strerror(rc)));
  }
  w.pid = pid;
  w.fd = pair[0];
  w.pending.clear();
  w.working = false;
}

void WorkerPool::stop(Worker& w) {
  if (w.fd >= 0) ::close(w.fd);
  w.fd = -1;
  if (w.pid > 0) {
    ::kill(-w.pid, SIGKILL);  // the worker's whole process group (start)
    ::waitpid(w.pid, nullptr, 0);
  }
  w.pid = -1;
}

void WorkerPool::fail(Worker& w, const std::string& why, std::vector<Reply>& out) {
  if (!warned_) {
    log::warn(cat(what_, " '", command_, "': ", why, "; the call fails and the worker is restarted (further "
                  "failures are counted in the stats)"));
    warned_ = true;
  }
  out.push_back({w.tag, std::nullopt, now_seconds() - w.submitted});
  --busy_;
  stop(w);
  start(w);
  ++restarts_;
}

void WorkerPool::submit(int64_t tag, std::string request) {
  queue_.push_back({tag, std::move(request), now_seconds()});
}

void WorkerPool::hand_out(std::vector<Reply>& out) {
  for (Worker& w : workers_) {
    if (w.working || queue_.empty()) continue;
    Request r = std::move(queue_.front());
    queue_.pop_front();
    w.tag = r.tag;
    w.working = true;
    w.submitted = r.submitted;
    w.deadline = now_seconds() + timeout_seconds_;
    ++busy_;
    if (!send_all(w.fd, r.line + "\n")) fail(w, "the worker exited before it read a request", out);
  }
}

std::vector<WorkerPool::Reply> WorkerPool::poll(double wait_seconds) {
  std::vector<Reply> out;
  const double wait_end = now_seconds() + std::max(0.0, wait_seconds);
  for (;;) {
    hand_out(out);
    std::vector<pollfd> fds;
    std::vector<Worker*> owners;
    double next_deadline = wait_end;
    for (Worker& w : workers_) {
      if (!w.working) continue;
      fds.push_back({w.fd, POLLIN, 0});
      owners.push_back(&w);
      next_deadline = std::min(next_deadline, w.deadline);
    }
    if (fds.empty()) return out;
    // Wait only while nothing came back and the caller's wait lasts.
    const double until = out.empty() ? next_deadline : now_seconds();
    const int wait_ms = std::max(0, static_cast<int>((until - now_seconds()) * 1000) + (out.empty() ? 1 : 0));
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno != EINTR) throw std::runtime_error(cat(what_, ": poll failed: ", std::strerror(errno)));
    const size_t before = out.size();
    for (size_t k = 0; k < fds.size(); ++k) {
      Worker& w = *owners[k];
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buffer[65536];
        const ssize_t n = ::recv(w.fd, buffer, sizeof buffer, 0);
        if (n <= 0) {
          fail(w, "the worker exited without answering", out);
          continue;
        }
        w.pending.append(buffer, static_cast<size_t>(n));
        const size_t newline = w.pending.find('\n');
        if (newline == std::string::npos) continue;
        std::string line = w.pending.substr(0, newline);
        w.pending.erase(0, newline + 1);
        if (!w.pending.empty() || !valid_(line)) {
          fail(w, cat("the reply '", line.substr(0, 80), "' is not one valid line per request"), out);
        } else {
          out.push_back({w.tag, std::move(line), now_seconds() - w.submitted});
          w.working = false;
          --busy_;
        }
      } else if (now_seconds() >= w.deadline) {
        fail(w, cat("no reply within ", format_fixed(timeout_seconds_, 1), " s (the timeout)"), out);
      }
    }
    if (out.size() > before) hand_out(out);  // freed workers take the queue's next requests
    if (!out.empty() || now_seconds() >= wait_end) return out;
  }
}

std::vector<std::optional<std::string>> WorkerPool::call_all(const std::vector<std::string>& requests) {
  for (size_t i = 0; i < requests.size(); ++i) submit(static_cast<int64_t>(i), requests[i]);
  std::vector<std::optional<std::string>> replies(requests.size());
  size_t received = 0;
  while (received < requests.size()) {
    for (Reply& r : poll(timeout_seconds_)) {
      replies[static_cast<size_t>(r.tag)] = std::move(r.line);
      ++received;
    }
  }
  return replies;
}

}  // namespace areal
