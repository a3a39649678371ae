// Typed reads of a Hugging Face config.json object for the model builders: a missing or
// mistyped key throws std::invalid_argument naming the key and the source file.
#pragma once

#include <nlohmann/json.hpp>

#include <map>
#include <set>
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

// The keys a family's config.json may hold beyond config_keys_without_math(): the ones its
// reader computes, ones that do not change its math (with the reason), and keys accepted
// only at the one value the family computes.
struct KeyTable {
  std::set<std::string> computed;
  std::map<std::string, std::string> without_math;
  std::map<std::string, nlohmann::json> fixed;
};

// Keys any family's config.json may carry that do not change what the model computes, each
// with the reason: PreTrainedConfig's own attributes (transformers 5 writes them all) and the
// 4.x names of the same things.
const std::map<std::string, std::string>& config_keys_without_math();

// Refuses, in one line naming `source`, the key and its value, every key of `json` that
// `table` and config_keys_without_math() do not list, and a fixed key at another value
// (std::invalid_argument).
void refuse_unknown_keys(const nlohmann::json& json, const std::string& source, const std::string& model_type,
                         const KeyTable& table);

}  // namespace fsdpp::models
