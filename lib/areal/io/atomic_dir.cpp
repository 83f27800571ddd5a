#include "areal/io/atomic_dir.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "areal/io/safetensors_header.h"
#include "areal/util/crash_point.h"
#include "areal/util/log.h"
#include "areal/util/strings.h"

namespace fs = std::filesystem;

namespace areal::io {
namespace {

// The pid in a name "<base><tag><pid>" (tag ".tmp-" or ".old-"), or -1.
pid_t debris_pid(const std::string& name, const std::string& base) {
  for (const char* tag : {".tmp-", ".old-"}) {
    const std::string prefix = base + tag;
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    const std::string digits = name.substr(prefix.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) return -1;
    return static_cast<pid_t>(std::stol(digits));
  }
  return -1;
}

// Removes what writes of `final_dir` by processes that no longer run left next to it
// (a crash mid-save): `<dir>.tmp-PID` (a new version, complete or not) and
// `<dir>.old-PID` (the one it replaced). A live PID's debris is left alone: another
// process may be saving. (PIDs are per host: debris on a shared file system from a
// dead job on another host whose PID is alive here stays until a later save.)
void remove_dead_saves_debris(const fs::path& final_dir, pid_t own_pid) {
  const fs::path parent = final_dir.parent_path();
  const std::string base = final_dir.filename().string();
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string name = entry.path().filename().string();
    const pid_t pid = debris_pid(name, base);
    if (pid <= 0 || pid == own_pid) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    std::error_code remove_error;
    fs::remove_all(entry.path(), remove_error);
    if (remove_error)
      log::warn(cat("could not remove ", entry.path().string(), ", left by a save that crashed (process ", pid,
                    "): ", remove_error.message()));
    else
      log::info(cat("removed ", entry.path().string(), ", left by a save that crashed (process ", pid, ")"));
  }
}

// Puts the finished `temp_dir` under the name `final_dir`. With an older version
// there, renameat2(RENAME_EXCHANGE) swaps the two names in one step, so at every
// instant the final name holds a complete version (the old one, then the new one);
// the old one, now under the temporary name, is removed after. A file system without
// the exchange (some network ones) gets two renames, with a short window in which the
// final name is missing and the new version sits complete under `.tmp-PID`.
void swap_into_place(const fs::path& temp_dir, const fs::path& final_dir, const std::string& after_swap) {
  if (!fs::exists(final_dir)) {
    fs::rename(temp_dir, final_dir);
    crash_point(after_swap);
    return;
  }
  if (::renameat2(AT_FDCWD, temp_dir.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
    crash_point(after_swap);
    fs::remove_all(temp_dir);
    return;
  }
  if (errno != EINVAL && errno != ENOSYS && errno != ENOTSUP)
    throw CheckpointError(cat(final_dir.string(), ": cannot swap in the new version: ", std::strerror(errno)));
  const fs::path old_dir = final_dir.string() + cat(".old-", ::getpid());
  fs::rename(final_dir, old_dir);
  fs::rename(temp_dir, final_dir);
  crash_point(after_swap);
  fs::remove_all(old_dir);
}

}  // namespace

fs::path normalized_dir(const std::string& dir) {
  fs::path path = fs::absolute(dir).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "run/checkpoint/"
  return path;
}

fs::path begin_dir_write(const fs::path& final_dir, pid_t pid) {
  const fs::path temp_dir = final_dir.string() + cat(".tmp-", pid);
  fs::create_directories(final_dir.parent_path());
  remove_dead_saves_debris(final_dir, pid);
  fs::remove_all(temp_dir);
  fs::create_directories(temp_dir);
  return temp_dir;
}

void commit_dir_write(const fs::path& temp_dir, const fs::path& final_dir, const std::string& label) {
  // One fsync pass over everything; files a writer already fsynced cost nothing here.
  for (const auto& entry : fs::directory_iterator(temp_dir))
    if (entry.is_regular_file()) fsync_path(entry.path());
  fsync_path(temp_dir);
  crash_point(label + ":before_swap");
  swap_into_place(temp_dir, final_dir, label + ":after_swap");
  fsync_path(final_dir.parent_path());
}

void fsync_path(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw CheckpointError(cat(path.string(), ": cannot open to fsync: ", std::strerror(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw CheckpointError(cat(path.string(), ": fsync failed: ", std::strerror(err)));
}

}  // namespace areal::io
