// Writing a directory so that a crash at any instant leaves under its name either the
// previous complete version or the new complete one: everything goes to
// `<dir>.tmp-PID`, is fsynced, and is swapped into place in one step. Used by Hugging
// Face checkpoints (checkpoint.h) and recover checkpoints (recover/), which several
// ranks write into one temporary directory (named after rank 0's PID).
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <string>

namespace areal::io {

// `dir` made absolute, without a trailing slash.
std::filesystem::path normalized_dir(const std::string& dir);

// Creates `<dir>.tmp-<pid>` afresh (and dir's parent) and returns it, after removing
// what saves of `dir` by processes that no longer run left behind (logged).
std::filesystem::path begin_dir_write(const std::filesystem::path& final_dir, pid_t pid);

// fsyncs every file in `temp_dir` and the directory, then swaps it into `final_dir`
// (the previous version is removed). `label` names the test-only crash points
// "<label>:before_swap" and "<label>:after_swap" (util/crash_point.h).
void commit_dir_write(const std::filesystem::path& temp_dir, const std::filesystem::path& final_dir,
                      const std::string& label);

// Flushes a file's data, or a directory's entries, to the disk.
void fsync_path(const std::filesystem::path& path);

}  // namespace areal::io
