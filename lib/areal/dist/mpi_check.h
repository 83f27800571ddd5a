// One check for every MPI call: a failed call throws with the call's name and MPI's
// own words (communicators use MPI_ERRORS_RETURN, so errors come back as codes).
#pragma once

#include <mpi.h>

#include <stdexcept>
#include <string>

namespace areal {

inline void check_mpi(int code, const char* call) {
  if (code == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, length));
}

}  // namespace areal

#define AREAL_MPI_CHECK(call) ::areal::check_mpi((call), #call)
