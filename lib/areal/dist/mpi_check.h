// One check for every MPI call: a failed call throws with the call, where it was made
// (file:line) and MPI's own words (communicators use MPI_ERRORS_RETURN, so errors come
// back as codes). __FILE_NAME__ (the file's name, no folder) keeps objects identical in
// every checkout, so ccache still hits across clones.
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <string>

namespace areal {

inline void check_mpi(int code, const char* call, const char* file, int line) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(call) + " failed at " + file + ":" + std::to_string(line) + ": " +
                           std::string(text, length));
}

}  // namespace areal

#define AREAL_MPI_CHECK(call) ::areal::check_mpi((call), #call, __FILE_NAME__, __LINE__)
