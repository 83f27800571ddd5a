#include "areal/util/progress.h"

#include <unistd.h>

#include <cstdio>

#include "areal/util/log.h"
#include "areal/util/memory.h"

namespace areal {

Progress::Progress(std::string label, int64_t total_bytes, bool enabled)
    : label_(std::move(label)), total_(total_bytes), enabled_(enabled), terminal_(::isatty(STDERR_FILENO)) {
  start_ = last_draw_ = std::chrono::steady_clock::now();
}

void Progress::advance(int64_t bytes) {
  done_ += bytes;
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (terminal_) {
    if (now - last_draw_ > std::chrono::milliseconds(100)) {
      last_draw_ = now;
      draw(false);
    }
  } else if (int decile = total_ > 0 ? static_cast<int>(10 * done_ / total_) : 10; decile > last_decile_) {
    last_decile_ = decile;
    draw(false);
  }
}

void Progress::finish() {
  if (enabled_ && (terminal_ || last_decile_ < 10)) draw(true);
}

void Progress::draw(bool final_line) {
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  double fraction = total_ > 0 ? static_cast<double>(done_) / total_ : 1.0;
  double rate = seconds > 0 ? done_ / seconds : 0;
  char text[160];
  std::snprintf(text, sizeof text, "%s: %5.1f%% %s of %s, %s/s", label_.c_str(), 100 * fraction,
                format_bytes(done_).c_str(), format_bytes(total_).c_str(), format_bytes(static_cast<int64_t>(rate)).c_str());
  if (terminal_) {
    const int width = 30;
    int filled = static_cast<int>(fraction * width);
    std::fprintf(stderr, "\r[%s%s] %s%s", std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(),
                 text, final_line ? "\n" : "");
    std::fflush(stderr);
  } else {
    log::info(text);
  }
}

}  // namespace areal
