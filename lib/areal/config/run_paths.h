// Where a run keeps its files: <cluster.fileroot>/<experiment_name>/<trial_name>/,
// as AReaL lays out its runs.
#pragma once

#include <fstream>
#include <string>

#include "areal/config/config.h"

namespace areal {

std::string run_dir(const Config& cfg);

// Writes `text` to run_dir(cfg)/name (creating the directory; temp file + rename).
// Returns the path written.
std::string write_run_file(const Config& cfg, const std::string& name, const std::string& text);

// Opens run_dir(cfg)/name for a log of JSON lines written step by step, such as
// stats.jsonl: afresh (truncated), or, for a run resumed after step `resumed_step`
// (>= 0), keeping the lines of steps up to it (and dropping those of the steps that
// will run again, and a line torn by a crash) and appending. Throws std::runtime_error
// naming the path and the reason when it cannot.
std::ofstream open_run_log(const Config& cfg, const std::string& name, int64_t resumed_step = -1);

}  // namespace areal
