// JSONL files of datasets: one JSON object per line, blank lines skipped.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

namespace areal {

// Calls `row(object, where)` for each line, `where` being "path:line" for messages.
// Throws std::runtime_error naming the file (unreadable) or the line (not an object).
void for_each_jsonl_object(const std::string& path,
                           const std::function<void(const nlohmann::json& object, const std::string& where)>& row);

}  // namespace areal
