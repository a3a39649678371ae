// manifest.json of a prepared data directory (format "fsdpp.data-manifest", version 1;
// specified in TOKENS.md): where the data came from, how it was cut, and its shards.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fsdpp::data {

inline constexpr const char* kManifestFormat = "fsdpp.data-manifest";
inline constexpr int kManifestVersion = 1;

struct ShardEntry {
  std::string file;  // relative to the manifest's directory
  int64_t tokens = 0;
  int64_t documents = 0;
};

// clang-tidy 14 takes the implicit noexcept move of the ordered_json members as throwing
// (nlohmann's move constructor is noexcept).
// NOLINTNEXTLINE(bugprone-exception-escape)
struct DataManifest {
  nlohmann::ordered_json source;     // {"input", "files", "skipped_files"}
  nlohmann::ordered_json tokenizer;  // {"path", "vocab_size", "document_separator": {"id", "token"}}
  nlohmann::ordered_json options;    // {"json_keys", "start_idx", "end_idx", "eval_fraction", "shard_tokens"}
  std::string dtype;                 // "uint16" or "uint32"
  int64_t documents_in_input = 0, documents_selected = 0, train_documents = 0, eval_documents = 0;
  int64_t train_tokens = 0, eval_tokens = 0;
  std::vector<ShardEntry> train_shards, eval_shards;

  nlohmann::ordered_json to_json() const;
  // Throws std::invalid_argument naming `source` and the field for another format, a
  // version other than 1, or a missing or mistyped field.
  static DataManifest from_json(const nlohmann::ordered_json& j, const std::string& source);
};

// Reads DIR/manifest.json (or the given file). Throws as from_json, or std::runtime_error
// if the file cannot be read.
DataManifest read_data_manifest(const std::filesystem::path& path);

}  // namespace fsdpp::data
