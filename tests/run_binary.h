// Runs a shell command (the areal-train binary, mpirun) from the source directory
// and captures its exit code, time and output, for tests of the real binary.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "test_paths.h"

struct Result {
  int exit_code = -1;
  double seconds = 0;  // wall time of the command
  std::string output;  // stdout and stderr together
  std::string stdout_only;
};

// Runs `args` through the shell from the source directory; stderr is captured
// separately so that --print-config output can be compared byte for byte.
inline Result run(const std::string& args) {
  auto stderr_path = std::filesystem::temp_directory_path() / ("areal_test_stderr_" + std::to_string(::getpid()));
  std::string command = "cd " + source_dir() + " && " + args + " 2>" + stderr_path.string();
  Result result;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) result.stdout_only.append(buffer, n);
  int status = pclose(pipe);
  result.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream err(stderr_path);
  std::stringstream text;
  text << err.rdbuf();
  std::filesystem::remove(stderr_path);
  result.output = result.stdout_only + text.str();
  return result;
}

