#include "areal/util/memory.h"

#include <malloc.h>

#include <cstdio>
#include <fstream>
#include <string>

namespace areal {
namespace {

// A "Name:  123 kB" field of a /proc file, in bytes.
int64_t proc_field_bytes(const char* file, const char* field) {
  std::ifstream status(file);
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(status, line))
    if (line.rfind(prefix, 0) == 0) return std::stoll(line.substr(prefix.size())) * 1024;  // reported in kB
  return 0;
}

}  // namespace

int64_t current_rss_bytes() { return proc_field_bytes("/proc/self/status", "VmRSS"); }
int64_t peak_rss_bytes() { return proc_field_bytes("/proc/self/status", "VmHWM"); }
int64_t available_host_bytes() { return proc_field_bytes("/proc/meminfo", "MemAvailable"); }

bool reset_peak_rss() {
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
  return static_cast<bool>(clear.flush());
}

void keep_freed_host_memory() {
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest allowed value on 64-bit
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
}

std::string format_bytes(int64_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while ((value >= 1024 || value <= -1024) && unit < 4) {
    value /= 1024;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof text, unit == 0 ? "%.0f %s" : "%.2f %s", value, units[unit]);
  return text;
}

}  // namespace areal
