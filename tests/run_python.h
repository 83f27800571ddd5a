// Runs one of the Python reference scripts (tests/python/) with the virtual
// environment's Python, for tests that compare against transformers or safetensors.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>

#include "test_paths.h"

struct PythonResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

inline PythonResult run_python(const std::string& script_and_args) {
  const std::string command =
      python_bin() + " " + source_path("tests/python/") + script_and_args + " 2>&1";
  PythonResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof buffer, pipe)) result.output.append(buffer, n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}
