// Where a benchmark's time goes, per operation: seconds per top-level operation name
// (ATen ops and areal's named scopes such as areal::paged_decode_attention) while
// recording, from torch's RecordFunction hooks; a nested operation counts in its caller.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace areal::bench {

// Installs the hooks (once per process); recording starts off.
void install_op_profile();
// Starts recording from zero, or stops.
void record_ops(bool on);
// Seconds per operation name recorded so far.
const std::map<std::string, double>& op_seconds();
// The same, largest first.
std::vector<std::pair<double, std::string>> ranked_ops();

}  // namespace areal::bench
