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

// A field holding a list of chat messages (AReaL's `messages`) as JSON text, checked:
// objects with a string 'role'. Throws std::runtime_error naming `where`.
std::string chat_messages_json(const nlohmann::json& messages, const std::string& where);
// The last user message's text in such a list ("" if none).
std::string last_user_text(const nlohmann::json& messages);

}  // namespace areal
