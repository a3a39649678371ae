// A Hugging Face model's config.json: the fields every model has, the whole document, and
// typed look-ups that fail with the key and the file named. Models read their own keys.
//
// Errors: std::runtime_error with one line naming the file and the problem.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fsdpp::io {

// Plain data: its implicit members throw only what copying a json or a vector may
// (allocation), which tidy's exception-escape reads into the implicit noexcept move.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct HfConfig {
  std::filesystem::path path;              // the config.json that was read
  std::string model_type;                  // "llama", "gpt2", ... (required)
  std::vector<std::string> architectures;  // e.g. {"LlamaForCausalLM"}; empty when absent
  nlohmann::json raw;                      // the whole document

  // Top-level keys. A key whose value is JSON null counts as absent (HF writes null for
  // "not set", e.g. "rope_scaling": null): the getters with a fallback return it, those
  // without throw naming the key and the file, as they do for a value of the wrong type.
  bool contains(const std::string& key) const;    // present and not null
  int64_t get_int(const std::string& key) const;  // JSON integer only (4096, not 4096.0)
  int64_t get_int(const std::string& key, int64_t fallback) const;
  double get_double(const std::string& key) const;  // JSON integer or float
  double get_double(const std::string& key, double fallback) const;
  bool get_bool(const std::string& key) const;
  bool get_bool(const std::string& key, bool fallback) const;
  std::string get_string(const std::string& key) const;
  std::string get_string(const std::string& key, const std::string& fallback) const;
};

// Reads `path`/config.json, or `path` itself when it names a file. Throws when the file is
// missing (naming the path looked at), is not valid JSON (naming the line and column), is
// not an object, lacks a string "model_type", or has "architectures" that is not a list of
// strings.
HfConfig load_hf_config(const std::filesystem::path& path);

}  // namespace fsdpp::io
