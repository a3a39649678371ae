#include "core/models/hf_json.h"

#include <stdexcept>

namespace fsdpp::models {

namespace {

[[noreturn]] void bad(const JsonReader& r, const std::string& key, const char* expected) {
  throw std::invalid_argument(r.source + ": key '" + key + "' " +
                              (r.json.contains(key) ? std::string("is not ") + expected : std::string("is missing")) +
                              (r.json.contains(key) ? "" : std::string(" (expected ") + expected + ")"));
}

}  // namespace

int64_t JsonReader::integer(const std::string& key) const {
  if (!json.contains(key) || !json[key].is_number_integer()) bad(*this, key, "an integer");
  return json[key].get<int64_t>();
}

int64_t JsonReader::integer(const std::string& key, int64_t fallback) const {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  return integer(key);
}

double JsonReader::number(const std::string& key, double fallback) const {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  if (!json[key].is_number()) bad(*this, key, "a number");
  return json[key].get<double>();
}

bool JsonReader::boolean(const std::string& key, bool fallback) const {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  if (!json[key].is_boolean()) bad(*this, key, "true or false");
  return json[key].get<bool>();
}

std::string JsonReader::text(const std::string& key, const std::string& fallback) const {
  if (!json.contains(key) || json[key].is_null()) return fallback;
  if (!json[key].is_string()) bad(*this, key, "a string");
  return json[key].get<std::string>();
}

}  // namespace fsdpp::models
