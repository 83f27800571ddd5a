#include "test_paths.h"

// Set by tests/CMakeLists.txt for this file only. Returned by value: test files call
// these from their static initializers, before any static of this file would exist.
std::string source_dir() { return AREAL_SOURCE_DIR; }
std::string source_path(const std::string& relative) { return source_dir() + "/" + relative; }
std::string train_bin() { return AREAL_TRAIN_BIN; }
std::string fault_bin() { return AREAL_FAULT_BIN; }
std::string mpirun_cmd() { return AREAL_MPIRUN; }
std::string python_bin() { return AREAL_PYTHON; }
