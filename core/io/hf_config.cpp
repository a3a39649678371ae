// config.json loading and typed look-ups (see hf_config.h). Field meanings follow
// transformers' PretrainedConfig: model_type selects the architecture family,
// architectures lists the model classes the weights were saved from.
#include "core/io/hf_config.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "core/io/json_depth.h"

namespace fsdpp::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

[[noreturn]] void fail(const fs::path& path, const std::string& problem) {
  throw std::runtime_error("HF config " + path.string() + ": " + problem);
}

// "a string (\"abc\")", "a float (4.5)", ...: what was found, for error messages.
std::string describe(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  const char* kind = value.is_number_float() ? "a float"
                     : value.is_number()     ? "an integer"
                     : value.is_string()     ? "a string"
                     : value.is_boolean()    ? "a boolean"
                     : value.is_array()      ? "an array"
                     : value.is_object()     ? "an object"
                                             : "null";
  return std::string(kind) + " (" + text + ")";
}

// The value at `key`, or nullptr when absent or null.
const json* find(const HfConfig& config, const std::string& key) {
  auto it = config.raw.find(key);
  if (it == config.raw.end() || it->is_null()) return nullptr;
  return &*it;
}

const json& require(const HfConfig& config, const std::string& key, const char* expected) {
  const json* value = find(config, key);
  if (value == nullptr) fail(config.path, "missing key '" + key + "' (expected " + expected + ")");
  return *value;
}

[[noreturn]] void wrong_type(const HfConfig& config, const std::string& key, const json& value, const char* expected) {
  fail(config.path, "key '" + key + "' is " + describe(value) + ", expected " + expected);
}

int64_t as_int(const HfConfig& config, const std::string& key, const json& value) {
  if (value.is_number_unsigned()) {
    if (value.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      wrong_type(config, key, value, "an integer that fits in int64");
    return static_cast<int64_t>(value.get<uint64_t>());
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  wrong_type(config, key, value, "an integer");
}

double as_double(const HfConfig& config, const std::string& key, const json& value) {
  if (!value.is_number()) wrong_type(config, key, value, "a number");
  return value.get<double>();
}

bool as_bool(const HfConfig& config, const std::string& key, const json& value) {
  if (!value.is_boolean()) wrong_type(config, key, value, "a boolean");
  return value.get<bool>();
}

std::string as_string(const HfConfig& config, const std::string& key, const json& value) {
  if (!value.is_string()) wrong_type(config, key, value, "a string");
  return value.get<std::string>();
}

}  // namespace

bool HfConfig::contains(const std::string& key) const { return find(*this, key) != nullptr; }

int64_t HfConfig::get_int(const std::string& key) const {
  return as_int(*this, key, require(*this, key, "an integer"));
}
int64_t HfConfig::get_int(const std::string& key, int64_t fallback) const {
  const json* value = find(*this, key);
  return value ? as_int(*this, key, *value) : fallback;
}

double HfConfig::get_double(const std::string& key) const {
  return as_double(*this, key, require(*this, key, "a number"));
}
double HfConfig::get_double(const std::string& key, double fallback) const {
  const json* value = find(*this, key);
  return value ? as_double(*this, key, *value) : fallback;
}

bool HfConfig::get_bool(const std::string& key) const { return as_bool(*this, key, require(*this, key, "a boolean")); }
bool HfConfig::get_bool(const std::string& key, bool fallback) const {
  const json* value = find(*this, key);
  return value ? as_bool(*this, key, *value) : fallback;
}

std::string HfConfig::get_string(const std::string& key) const {
  return as_string(*this, key, require(*this, key, "a string"));
}
std::string HfConfig::get_string(const std::string& key, const std::string& fallback) const {
  const json* value = find(*this, key);
  return value ? as_string(*this, key, *value) : fallback;
}

HfConfig load_hf_config(const fs::path& path) {
  HfConfig config;
  config.path = fs::is_directory(path) ? path / "config.json" : path;
  std::ifstream in(config.path, std::ios::binary);
  if (!in) fail(config.path, std::string("cannot open: ") + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (const auto problem = json_depth_problem(text.str()); !problem.empty())
    fail(config.path, "invalid JSON: " + problem);
  try {
    config.raw = json::parse(text.str());
  } catch (const json::parse_error& e) {
    // e.what() carries "at line L, column C"; e.byte is the 1-based byte offset.
    fail(config.path, "invalid JSON at byte " + std::to_string(e.byte) + ": " + e.what());
  }
  if (!config.raw.is_object()) fail(config.path, "top level is " + describe(config.raw) + ", expected an object");
  config.model_type = as_string(config, "model_type", require(config, "model_type", "a string such as \"llama\""));
  if (const json* archs = find(config, "architectures")) {
    if (!archs->is_array()) wrong_type(config, "architectures", *archs, "a list of strings");
    for (const auto& a : *archs) {
      if (!a.is_string()) wrong_type(config, "architectures", *archs, "a list of strings");
      config.architectures.push_back(a.get<std::string>());
    }
  }
  return config;
}

}  // namespace fsdpp::io
