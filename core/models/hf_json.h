// Typed reads of a Hugging Face config.json object for the model builders: a missing or
// mistyped key throws std::invalid_argument naming the key and the source file.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

namespace fsdpp::models {

struct JsonReader {
  const nlohmann::json& json;
  std::string source;  // e.g. the config.json path, for messages

  int64_t integer(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback) const;  // also when null
  double number(const std::string& key, double fallback) const;
  bool boolean(const std::string& key, bool fallback) const;
  std::string text(const std::string& key, const std::string& fallback) const;
};

}  // namespace fsdpp::models
