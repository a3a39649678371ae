#include "core/io/yaml_json.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <stdexcept>

namespace fsdpp::io {

namespace {

std::string where(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null()) return source;
  return source + ":" + std::to_string(mark.line + 1) + ":" + std::to_string(mark.column + 1);
}

// A plain scalar under YAML 1.2's core schema (https://yaml.org/spec/1.2.2/#1032-tag-resolution).
template <class Json>
Json resolve_plain(const std::string& s) {
  static const std::regex kBool("true|True|TRUE|false|False|FALSE");
  static const std::regex kDecimal("[-+]?[0-9]+");
  static const std::regex kOctal("0o[0-7]+");
  static const std::regex kHex("0x[0-9a-fA-F]+");
  static const std::regex kFloat("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  if (std::regex_match(s, kBool)) return s[0] == 't' || s[0] == 'T';
  const bool octal = std::regex_match(s, kOctal), hex = std::regex_match(s, kHex);
  if (octal || hex || std::regex_match(s, kDecimal)) {
    errno = 0;
    const char* digits = octal || hex ? s.c_str() + 2 : s.c_str();
    const int base = octal ? 8 : hex ? 16 : 10;
    const long long v = std::strtoll(digits, nullptr, base);
    if (errno == 0) return static_cast<int64_t>(v);
    errno = 0;
    const unsigned long long u = std::strtoull(digits, nullptr, base);
    if (errno == 0 && s[0] != '-') return static_cast<uint64_t>(u);
    if (!octal && !hex) return std::strtod(s.c_str(), nullptr);
    return s;  // hex / octal beyond 64 bits: kept as written
  }
  if (std::regex_match(s, kFloat)) return std::strtod(s.c_str(), nullptr);
  return s;
}

template <class Json>
Json convert(const YAML::Node& node, const std::string& source) {
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null:
      return nullptr;
    case YAML::NodeType::Scalar:
      // yaml-cpp tags plain scalars "?" and quoted / block scalars "!".
      return node.Tag() == "?" ? resolve_plain<Json>(node.Scalar()) : Json(node.Scalar());
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(convert<Json>(item, source));
      return out;
    }
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar())
          throw std::invalid_argument(where(source, kv.first.Mark()) + ": mapping key is not a scalar (expected a string key)");
        const std::string& key = kv.first.Scalar();
        if (out.contains(key))
          throw std::invalid_argument(where(source, kv.first.Mark()) + ": duplicate key '" + key + "'");
        out[key] = convert<Json>(kv.second, source);
      }
      return out;
    }
  }
  return nullptr;
}

std::vector<YAML::Node> load_all(const std::string& text, const std::string& source) {
  try {
    return YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(where(source, e.mark) + ": invalid YAML: " + e.msg);
  }
}

}  // namespace

template <class Json>
Json yaml_documents_to_json(const std::string& text, const std::string& source) {
  Json out = Json::array();
  for (const auto& doc : load_all(text, source)) out.push_back(convert<Json>(doc, source));
  return out;
}

template <class Json>
Json yaml_to_json(const std::string& text, const std::string& source) {
  const auto docs = load_all(text, source);
  if (docs.size() > 1)
    throw std::invalid_argument(where(source, docs[1].Mark()) + ": a second YAML document (expected one)");
  return docs.empty() ? Json(nullptr) : convert<Json>(docs[0], source);
}

template <class Json>
Json parse_json_text(const std::string& text, const std::string& source) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();  // "[json.exception.parse_error.101] parse error at line 1, column 2: ..."
    if (const auto close = what.find("] "); what.rfind("[json.exception", 0) == 0 && close != std::string::npos)
      what = what.substr(close + 2);
    throw std::invalid_argument(source + ": invalid JSON: " + what);
  }
}

template nlohmann::json yaml_to_json<nlohmann::json>(const std::string&, const std::string&);
template nlohmann::ordered_json yaml_to_json<nlohmann::ordered_json>(const std::string&, const std::string&);
template nlohmann::json yaml_documents_to_json<nlohmann::json>(const std::string&, const std::string&);
template nlohmann::ordered_json yaml_documents_to_json<nlohmann::ordered_json>(const std::string&, const std::string&);
template nlohmann::json parse_json_text<nlohmann::json>(const std::string&, const std::string&);
template nlohmann::ordered_json parse_json_text<nlohmann::ordered_json>(const std::string&, const std::string&);

nlohmann::json load_json_or_yaml_file(const std::filesystem::path& path) {
  std::string ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  if (ext != ".json" && ext != ".yaml" && ext != ".yml")
    throw std::runtime_error(path.string() + ": unknown config file type (expected .json, .yaml or .yml)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot read file");
  std::ostringstream text;
  text << in.rdbuf();
  return ext == ".json" ? parse_json_text(text.str(), path.string()) : yaml_to_json(text.str(), path.string());
}

}  // namespace fsdpp::io
