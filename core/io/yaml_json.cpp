#include "core/io/yaml_json.h"

#include <nlohmann/json.hpp>
#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "core/io/json_depth.h"

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

// One text's conversion. Aliases share their anchor's node, so a few bytes can stand for
// exponentially many values ("billion laughs"), or for an infinite tree through an alias to
// a node that contains it: both are refused, with a budget of values that no alias-free
// text reaches (each value takes a byte of text, or two values one: "{a}") and a check
// against the sequences and maps being converted.
struct Conversion {
  static constexpr size_t kAliasValues = size_t{1} << 16;
  Conversion(const std::string& text, const std::string& source_name)
      : source(source_name), values_left(2 * text.size() + kAliasValues) {}
  const std::string& source;
  size_t values_left;
  std::vector<YAML::Node> open;  // sequences and maps being converted, outermost first
};

// Marks `node` as being converted for the lifetime of this object.
class OpenNode {
 public:
  OpenNode(Conversion& c, const YAML::Node& node) : c_(c) {
    for (const auto& outer : c_.open)
      if (outer.is(node))
        throw std::invalid_argument(where(c_.source, node.Mark()) +
                                    ": an alias refers to a node that contains it (expected a finite document)");
    c_.open.push_back(node);
  }
  ~OpenNode() { c_.open.pop_back(); }
  OpenNode(const OpenNode&) = delete;
  OpenNode& operator=(const OpenNode&) = delete;

 private:
  Conversion& c_;
};

template <class Json>
Json convert(const YAML::Node& node, Conversion& c) {
  const std::string& source = c.source;
  if (c.values_left-- == 0)
    throw std::invalid_argument(where(source, node.Mark()) + ": aliases expand to more than " +
                                std::to_string(Conversion::kAliasValues) +
                                " values beyond the text's own (expected aliases that repeat a few nodes)");
  switch (node.Type()) {
    case YAML::NodeType::Undefined:
    case YAML::NodeType::Null: return nullptr;
    case YAML::NodeType::Scalar:
      // yaml-cpp tags plain scalars "?" and quoted / block scalars "!".
      return node.Tag() == "?" ? resolve_plain<Json>(node.Scalar()) : Json(node.Scalar());
    case YAML::NodeType::Sequence: {
      OpenNode open(c, node);
      Json out = Json::array();
      for (const auto& item : node) out.push_back(convert<Json>(item, c));
      return out;
    }
    case YAML::NodeType::Map: {
      OpenNode open(c, node);
      Json out = Json::object();
      for (const auto& kv : node) {
        if (!kv.first.IsScalar())
          throw std::invalid_argument(where(source, kv.first.Mark()) +
                                      ": mapping key is not a scalar (expected a string key)");
        const std::string& key = kv.first.Scalar();
        if (out.contains(key))
          throw std::invalid_argument(where(source, kv.first.Mark()) + ": duplicate key '" + key + "'");
        out[key] = convert<Json>(kv.second, c);
      }
      return out;
    }
  }
  return nullptr;
}

// Counts documents with yaml-cpp's parser alone (events dropped): for a document start
// that no "---" or "..." allows, yaml-cpp 0.7's LoadAll never returns. On `"",` the stray
// ',' begins an empty document again and again, each one kept, until memory runs out.
class DocumentCounter : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    ++documents;
    last_start = mark;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}

  size_t documents = 0;
  YAML::Mark last_start;
};

std::vector<YAML::Node> load_all(const std::string& text, const std::string& source) {
  try {
    // Every document after the first follows a "---" or a "...".
    size_t markers = 0;
    for (const char* marker : {"---", "..."})
      for (size_t at = text.find(marker); at != std::string::npos; at = text.find(marker, at + 3)) ++markers;
    std::istringstream stream(text);
    YAML::Parser parser(stream);
    DocumentCounter counter;
    while (parser.HandleNextDocument(counter))
      if (counter.documents > markers + 1)
        throw std::invalid_argument(where(source, counter.last_start) +
                                    ": invalid YAML: text after a document that starts no new one (expected '---' "
                                    "before each document after the first)");
    return YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    throw std::invalid_argument(where(source, e.mark) + ": invalid YAML: " + e.msg);
  }
}

}  // namespace

template <class Json>
Json yaml_documents_to_json(const std::string& text, const std::string& source) {
  Json out = Json::array();
  Conversion conversion(text, source);
  for (const auto& doc : load_all(text, source)) out.push_back(convert<Json>(doc, conversion));
  return out;
}

template <class Json>
Json yaml_to_json(const std::string& text, const std::string& source) {
  const auto docs = load_all(text, source);
  if (docs.size() > 1)
    throw std::invalid_argument(where(source, docs[1].Mark()) + ": a second YAML document (expected one)");
  Conversion conversion(text, source);
  return docs.empty() ? Json(nullptr) : convert<Json>(docs[0], conversion);
}

template <class Json>
Json parse_json_text(const std::string& text, const std::string& source) {
  if (const auto problem = json_depth_problem(text); !problem.empty())
    throw std::invalid_argument(source + ": invalid JSON: " + problem);
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
