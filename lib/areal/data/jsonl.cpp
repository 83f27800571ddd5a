#include "areal/data/jsonl.h"

#include <fstream>
#include <stdexcept>

#include "areal/util/strings.h"

namespace areal {

void for_each_jsonl_object(const std::string& path,
                           const std::function<void(const nlohmann::json& object, const std::string& where)>& row) {
  std::ifstream file(path);
  if (!file) throw std::runtime_error(cat(path, ": cannot read the dataset"));
  std::string line;
  for (int64_t number = 1; std::getline(file, line); ++number) {
    if (trim(line).empty()) continue;
    const std::string where = cat(path, ":", number);
    nlohmann::json object = nlohmann::json::parse(line, nullptr, false);
    if (object.is_discarded() || !object.is_object()) throw std::runtime_error(cat(where, ": not a JSON object"));
    row(object, where);
  }
}

std::string chat_messages_json(const nlohmann::json& messages, const std::string& where) {
  for (const auto& message : messages)
    if (!message.is_object() || !message.contains("role") || !message["role"].is_string())
      throw std::runtime_error(cat(where, ": a list of messages needs objects with a string 'role'"));
  return messages.dump();
}

std::string last_user_text(const nlohmann::json& messages) {
  for (auto it = messages.rbegin(); it != messages.rend(); ++it)
    if ((*it)["role"] == "user" && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"];
  return "";
}

}  // namespace areal
