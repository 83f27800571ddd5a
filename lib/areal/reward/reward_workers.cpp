#include "areal/reward/reward_workers.h"

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

// The number on a reply line, or nothing for anything else.
bool parse_reward(const std::string& line, double& value) {
  const std::string text = trim(line);
  if (text.empty()) return false;
  char* end = nullptr;
  errno = 0;
  value = std::strtod(text.c_str(), &end);
  return errno == 0 && end == text.c_str() + text.size() && std::isfinite(value);
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

RewardWorkers::RewardWorkers(std::string command, int64_t workers, double timeout_seconds)
    : command_(std::move(command)), timeout_seconds_(timeout_seconds), workers_(static_cast<size_t>(workers)) {
  for (Worker& w : workers_) start(w);
}

RewardWorkers::~RewardWorkers() {
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

void RewardWorkers::check_running(double seconds) {
  const double end = now_seconds() + seconds;
  do {
    for (Worker& w : workers_) {
      int status = 0;
      if (w.pid > 0 && ::waitpid(w.pid, &status, WNOHANG) == w.pid) {
        w.pid = -1;
        const std::string how = WIFEXITED(status) ? cat("exited with status ", WEXITSTATUS(status))
                                                  : cat("was killed by signal ", WTERMSIG(status));
        throw std::runtime_error(cat("reward command '", command_, "' ", how, " right after it started, before "
                                     "reading an answer (its error output is above)"));
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (now_seconds() < end);
}

void RewardWorkers::start(Worker& w) {
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0)
    throw std::runtime_error(cat("reward command: socketpair failed: ", std::strerror(errno)));
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
    throw std::runtime_error(cat("reward command '", command_, "' could not be started: ", std::strerror(rc)));
  }
  w.pid = pid;
  w.fd = pair[0];
  w.pending.clear();
  w.request = -1;
}

void RewardWorkers::stop(Worker& w) {
  if (w.fd >= 0) ::close(w.fd);
  w.fd = -1;
  if (w.pid > 0) {
    ::kill(-w.pid, SIGKILL);  // the worker's whole process group (start)
    ::waitpid(w.pid, nullptr, 0);
  }
  w.pid = -1;
}

// The worker's current request scores 0; the worker is replaced.
void RewardWorkers::fail(Worker& w, const std::string& why, std::vector<double>& results, int64_t& failures) {
  if (!warned_) {
    log::warn(cat("reward command '", command_, "': ", why, "; the answer scores 0 and the worker is restarted "
                  "(further failures are counted in the stats)"));
    warned_ = true;
  }
  results[static_cast<size_t>(w.request)] = 0.0;
  ++failures;
  stop(w);
  start(w);
  ++restarts_;
}

std::vector<double> RewardWorkers::score(const std::vector<std::string>& requests, int64_t& failures) {
  std::vector<double> results(requests.size(), 0.0);
  std::deque<int64_t> waiting;
  for (size_t i = 0; i < requests.size(); ++i) waiting.push_back(static_cast<int64_t>(i));
  size_t busy = 0;
  while (!waiting.empty() || busy > 0) {
    for (Worker& w : workers_) {  // hand out work
      if (w.request >= 0 || waiting.empty()) continue;
      w.request = waiting.front();
      waiting.pop_front();
      w.deadline = now_seconds() + timeout_seconds_;
      ++busy;
      if (!send_all(w.fd, requests[static_cast<size_t>(w.request)] + "\n")) {
        fail(w, "the worker exited before it read a request", results, failures);
        --busy;
      }
    }
    std::vector<pollfd> fds;
    std::vector<Worker*> owners;
    double next_deadline = now_seconds() + timeout_seconds_;
    for (Worker& w : workers_) {
      if (w.request < 0) continue;
      fds.push_back({w.fd, POLLIN, 0});
      owners.push_back(&w);
      next_deadline = std::min(next_deadline, w.deadline);
    }
    if (fds.empty()) continue;
    const int wait_ms = std::max(0, static_cast<int>((next_deadline - now_seconds()) * 1000) + 1);
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno != EINTR) throw std::runtime_error(cat("reward command: poll failed: ", std::strerror(errno)));
    for (size_t k = 0; k < fds.size(); ++k) {
      Worker& w = *owners[k];
      if (fds[k].revents & (POLLIN | POLLHUP | POLLERR)) {
        char buffer[4096];
        const ssize_t n = ::recv(w.fd, buffer, sizeof buffer, 0);
        if (n <= 0) {
          fail(w, "the worker exited without answering", results, failures);
          --busy;
          continue;
        }
        w.pending.append(buffer, static_cast<size_t>(n));
        const size_t newline = w.pending.find('\n');
        if (newline == std::string::npos) continue;
        const std::string line = w.pending.substr(0, newline);
        w.pending.erase(0, newline + 1);
        double value = 0;
        if (!parse_reward(line, value) || !w.pending.empty()) {
          fail(w, cat("the reply '", line.substr(0, 80), "' is not one number per line"), results, failures);
        } else {
          results[static_cast<size_t>(w.request)] = value;
          w.request = -1;
        }
        --busy;
      } else if (now_seconds() >= w.deadline) {
        fail(w, cat("no reply within reward_timeout = ", format_fixed(timeout_seconds_, 1), " s"), results, failures);
        --busy;
      }
    }
  }
  return results;
}

}  // namespace areal
