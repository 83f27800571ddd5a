// Where the tests find the checkout and the programs they run. The paths are compiled
// into test_paths.cpp alone: no other test object holds the checkout's path, so a
// clone in another folder reuses the compiler cache for every other file.
#pragma once

#include <string>

std::string source_dir();                              // the checkout
std::string source_path(const std::string& relative);  // source_dir() + "/" + relative
std::string train_bin();                               // the areal-train binary
std::string fault_bin();                               // tests/mpi/fault_main.cpp's program
std::string mpirun_cmd();                              // mpirun with the flags this machine needs
std::string python_bin();                              // the virtual environment's Python
