// Progress of long work (bytes loaded, steps done) on rank 0: a bar redrawn in place
// on a terminal, plain log lines at every 10% otherwise (batch logs stay readable).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace areal {

class Progress {
 public:
  // `enabled`: false on the ranks that should stay quiet.
  Progress(std::string label, int64_t total_bytes, bool enabled);
  void advance(int64_t bytes);
  void finish();

 private:
  void draw(bool final_line);
  std::string label_;
  int64_t total_ = 0;
  int64_t done_ = 0;
  bool enabled_ = false;
  bool terminal_ = false;
  int last_decile_ = -1;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace areal
