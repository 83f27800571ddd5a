// Small string helpers shared by the config layer and logging.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace areal {

// Concatenates anything that streams: cat("rank ", 3, " of ", 4).
template <typename... Args>
std::string cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

std::vector<std::string> split(std::string_view text, char sep);
std::string trim(std::string_view text);
std::string join(const std::vector<std::string>& items, std::string_view sep);
// "[3, 5, 7]": a tensor shape as messages print it.
std::string shape_text(const std::vector<int64_t>& shape);

// A number with `decimals` digits after the point: format_fixed(41.666, 1) == "41.7".
std::string format_fixed(double value, int decimals);

bool starts_with(std::string_view text, std::string_view prefix);
bool ends_with(std::string_view text, std::string_view suffix);

// Levenshtein distance (insert, delete, substitute; each costs 1).
size_t edit_distance(std::string_view a, std::string_view b);

// The candidate closest to `name` by edit distance, or "" when none is close enough
// to be a plausible typo (distance above a third of the name's length, at least 2).
std::string closest_match(std::string_view name, const std::vector<std::string>& candidates);

}  // namespace areal
