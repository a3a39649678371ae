#include "harness/results/json_schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <regex>
#include <stdexcept>
#include <utility>

namespace fsdpp::results {

using nlohmann::json;

// One compiled (sub)schema. Children point into JsonSchema::nodes_, which owns them all.
struct JsonSchema::Node {
  std::string path;             // "#/$defs/cell", for compile errors and messages
  std::optional<bool> boolean;  // the schema was `true` or `false`
  std::string description;
  std::vector<std::string> types;
  std::optional<json> const_value;
  std::optional<json> enum_values;  // an array
  std::vector<std::string> required;
  std::vector<std::pair<std::string, const Node*>> properties;
  const Node* additional_properties = nullptr;
  const Node* items = nullptr;
  std::optional<size_t> min_items, max_items, min_length;
  std::optional<json> minimum, maximum;  // numbers, kept as written for messages
  std::string pattern_text;
  std::optional<std::regex> pattern;
  std::vector<const Node*> all_of;
  const Node* if_schema = nullptr;
  const Node* then_schema = nullptr;
  const Node* else_schema = nullptr;
  std::string ref;
  const Node* ref_target = nullptr;
};

namespace {

const std::vector<std::string> kTypeNames = {"null", "boolean", "object", "array", "number", "integer", "string"};

// Short, readable rendering of an instance value for messages.
std::string describe(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return std::string("boolean ") + (value.get<bool>() ? "true" : "false");
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer " + value.dump();
    case json::value_t::number_float: {
      double v = value.get<double>();
      if (!std::isfinite(v)) return std::isnan(v) ? "NaN" : (v > 0 ? "Infinity" : "-Infinity");
      return "number " + value.dump();
    }
    case json::value_t::string: {
      std::string text = value.dump();
      if (text.size() > 60) text = text.substr(0, 57) + "...\"";
      return "string " + text;
    }
    case json::value_t::array: return "array of " + std::to_string(value.size()) + " items";
    case json::value_t::object: return "object";
    default: return "a binary value";
  }
}

bool is_finite_number(const json& value) {
  if (!value.is_number()) return false;
  return !value.is_number_float() || std::isfinite(value.get<double>());
}

bool has_type(const json& value, const std::string& type) {
  if (type == "null") return value.is_null();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "string") return value.is_string();
  if (type == "number") return is_finite_number(value);
  // "integer": any number with a zero fractional part (draft 2020-12, section 6.1.1).
  if (value.is_number_integer()) return true;
  if (!is_finite_number(value)) return false;
  double v = value.get<double>();
  return v == std::floor(v);
}

std::string join_quoted(const json& values) {
  std::string out;
  for (const auto& v : values) out += (out.empty() ? "" : ", ") + v.dump();
  return out;
}

size_t utf8_length(const std::string& text) {
  return static_cast<size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

}  // namespace

std::string json_pointer_token(const std::string& token) {
  std::string out;
  for (char c : token) {
    if (c == '~')
      out += "~0";
    else if (c == '/')
      out += "~1";
    else
      out += c;
  }
  return out;
}

std::string SchemaViolation::to_string() const {
  return (pointer.empty() ? std::string("(document)") : pointer) + ": " + message;
}

const std::vector<std::string>& JsonSchema::supported_keywords() {
  static const std::vector<std::string> keywords = {"$schema",
                                                    "$id",
                                                    "$comment",
                                                    "title",
                                                    "description",
                                                    "$defs",
                                                    "$ref",
                                                    "type",
                                                    "enum",
                                                    "const",
                                                    "required",
                                                    "properties",
                                                    "additionalProperties",
                                                    "items",
                                                    "minItems",
                                                    "maxItems",
                                                    "minimum",
                                                    "maximum",
                                                    "minLength",
                                                    "pattern",
                                                    "allOf",
                                                    "if",
                                                    "then",
                                                    "else"};
  return keywords;
}

// Walks the schema document once, turning each (sub)schema into a Node and checking the
// shape of every keyword's value.
struct JsonSchema::Compiler {
  JsonSchema& out;
  const std::string& source;
  std::map<std::string, const Node*> by_path;

  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw std::invalid_argument(source + ": " + path + ": " + what);
  }

  size_t count(const json& value, const std::string& path) const {
    if (!value.is_number_integer() || value.get<int64_t>() < 0) fail(path, "expected a non-negative integer");
    return value.get<size_t>();
  }

  // A $ref is a URI reference: its fragment may percent-encode characters (RFC 3986, 2.1),
  // the pointer tokens ("~0", "~1") stay as they are, as in Node::path.
  std::string percent_decoded(const std::string& ref, const std::string& path) const {
    std::string out;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (ref[i] != '%') {
        out += ref[i];
        continue;
      }
      if (i + 2 >= ref.size() || !std::isxdigit(static_cast<unsigned char>(ref[i + 1])) ||
          !std::isxdigit(static_cast<unsigned char>(ref[i + 2])))
        fail(path, "\"" + ref + "\": '%' must be followed by two hex digits");
      out += static_cast<char>(std::stoi(ref.substr(i + 1, 2), nullptr, 16));
      i += 2;
    }
    return out;
  }

  const json& number(const json& value, const std::string& path) const {
    if (!is_finite_number(value)) fail(path, "expected a number");
    return value;
  }

  const Node* compile(const json& schema, const std::string& path) {
    out.nodes_.push_back(std::make_unique<Node>());
    Node& node = *out.nodes_.back();
    node.path = path;
    by_path[path] = &node;
    if (schema.is_boolean()) {
      node.boolean = schema.get<bool>();
      return &node;
    }
    if (!schema.is_object()) fail(path, "a schema must be an object or a boolean, got " + describe(schema));
    const auto& known = supported_keywords();
    for (const auto& [key, value] : schema.items()) {
      const std::string at = path + "/" + json_pointer_token(key);
      if (std::find(known.begin(), known.end(), key) == known.end())
        fail(at,
             "unsupported keyword \"" + key + "\" (this validator supports only: " + join_quoted(json(known)) + ")");
      if (key == "$schema" || key == "$id" || key == "$comment" || key == "title" || key == "description") {
        if (!value.is_string()) fail(at, "expected a string");
        // Below the root, $id starts an embedded resource whose "#" is itself (Core 2020-12,
        // 8.2.1); $ref here resolves against the one document only.
        if (key == "$id" && path != "#") fail(at, "\"$id\" below the root (an embedded resource) is not supported");
        if (key == "description") node.description = value.get<std::string>();
      } else if (key == "$defs") {
        if (!value.is_object()) fail(at, "expected an object of schemas");
        for (const auto& [name, sub] : value.items()) compile(sub, at + "/" + json_pointer_token(name));
      } else if (key == "$ref") {
        const std::string ref = value.is_string() ? value.get<std::string>() : "";
        if (ref != "#" && ref.rfind("#/", 0) != 0)
          fail(at,
               "expected a JSON pointer into this document (\"#\", \"#/$defs/name\"); other documents, "
               "anchors and relative references are not supported");
        node.ref = percent_decoded(ref, at);
      } else if (key == "type") {
        json names = value.is_array() ? value : json::array({value});
        if (names.empty()) fail(at, "expected a type name or a non-empty array of them");
        for (const auto& name : names) {
          if (!name.is_string() ||
              std::find(kTypeNames.begin(), kTypeNames.end(), name.get<std::string>()) == kTypeNames.end())
            fail(at, "expected type names among " + join_quoted(json(kTypeNames)) + ", got " + describe(name));
          node.types.push_back(name.get<std::string>());
        }
      } else if (key == "enum") {
        if (!value.is_array() || value.empty()) fail(at, "expected a non-empty array");
        node.enum_values = value;
      } else if (key == "const") {
        node.const_value = value;
      } else if (key == "required") {
        if (!value.is_array()) fail(at, "expected an array of property names");
        for (const auto& name : value) {
          if (!name.is_string()) fail(at, "expected an array of property names, got " + describe(name));
          node.required.push_back(name.get<std::string>());
        }
      } else if (key == "properties") {
        if (!value.is_object()) fail(at, "expected an object of schemas");
        for (const auto& [name, sub] : value.items())
          node.properties.emplace_back(name, compile(sub, at + "/" + json_pointer_token(name)));
      } else if (key == "additionalProperties") {
        node.additional_properties = compile(value, at);
      } else if (key == "items") {
        if (value.is_array()) fail(at, "expected one schema (draft 2020-12 spells tuples prefixItems)");
        node.items = compile(value, at);
      } else if (key == "minItems") {
        node.min_items = count(value, at);
      } else if (key == "maxItems") {
        node.max_items = count(value, at);
      } else if (key == "minLength") {
        node.min_length = count(value, at);
      } else if (key == "minimum") {
        node.minimum = number(value, at);
      } else if (key == "maximum") {
        node.maximum = number(value, at);
      } else if (key == "pattern") {
        if (!value.is_string()) fail(at, "expected a regular expression string");
        node.pattern_text = value.get<std::string>();
        try {
          node.pattern.emplace(node.pattern_text, std::regex::ECMAScript);
        } catch (const std::regex_error& e) {
          fail(at, "invalid regular expression: " + std::string(e.what()));
        }
      } else if (key == "allOf") {
        if (!value.is_array() || value.empty()) fail(at, "expected a non-empty array of schemas");
        for (size_t i = 0; i < value.size(); ++i)
          node.all_of.push_back(compile(value[i], at + "/" + std::to_string(i)));
      } else if (key == "if") {
        node.if_schema = compile(value, at);
      } else if (key == "then") {
        node.then_schema = compile(value, at);
      } else if (key == "else") {
        node.else_schema = compile(value, at);
      }
    }
    if ((node.then_schema || node.else_schema) && !node.if_schema)
      fail(path, "\"then\"/\"else\" without \"if\" has no effect");
    return &node;
  }

  void resolve_refs() {
    for (auto& node : out.nodes_) {
      if (node->ref.empty()) continue;
      auto it = by_path.find(node->ref);
      if (it == by_path.end()) fail(node->path + "/$ref", "\"" + node->ref + "\" is not a schema in this document");
      node->ref_target = it->second;
    }
  }
};

JsonSchema::JsonSchema(const json& schema, const std::string& source) {
  Compiler compiler{*this, source, {}};
  compiler.compile(schema, "#");
  compiler.resolve_refs();
}

JsonSchema::~JsonSchema() = default;
JsonSchema::JsonSchema(JsonSchema&&) noexcept = default;
JsonSchema& JsonSchema::operator=(JsonSchema&&) noexcept = default;

std::optional<SchemaViolation> JsonSchema::first_violation(const json& instance) const {
  return check(*nodes_.front(), instance, "");
}

void JsonSchema::validate(const json& instance, const std::string& source) const {
  if (auto violation = first_violation(instance)) throw std::runtime_error(source + ": " + violation->to_string());
}

std::optional<SchemaViolation> JsonSchema::check(const Node& node, const json& instance,
                                                 const std::string& pointer) const {
  auto violation = [&](std::string message) { return std::optional<SchemaViolation>({pointer, std::move(message)}); };
  if (node.boolean) {
    if (*node.boolean) return std::nullopt;
    return violation("no value is allowed here (schema " + node.path + " is false)");
  }

  // A value of the wrong type makes every other message noise: stop at the first.
  if (!node.types.empty() &&
      std::none_of(node.types.begin(), node.types.end(), [&](const auto& t) { return has_type(instance, t); })) {
    std::string expected;
    for (const auto& t : node.types) expected += (expected.empty() ? "" : " or ") + t;
    return violation("expected " + expected + ", got " + describe(instance));
  }
  if (node.const_value && *node.const_value != instance)
    return violation("expected " + node.const_value->dump() + ", got " + describe(instance));
  if (node.enum_values &&
      std::find(node.enum_values->begin(), node.enum_values->end(), instance) == node.enum_values->end())
    return violation("expected one of " + join_quoted(*node.enum_values) + ", got " + describe(instance));

  if (instance.is_number()) {
    double v = instance.get<double>();
    if (node.minimum && !(v >= node.minimum->get<double>()))
      return violation("expected a number >= " + node.minimum->dump() + ", got " + describe(instance));
    if (node.maximum && !(v <= node.maximum->get<double>()))
      return violation("expected a number <= " + node.maximum->dump() + ", got " + describe(instance));
  }
  if (instance.is_string()) {
    const auto& text = instance.get_ref<const std::string&>();
    if (node.min_length && utf8_length(text) < *node.min_length)
      return violation("expected a string of at least " + std::to_string(*node.min_length) + " characters, got " +
                       describe(instance));
    if (node.pattern && !std::regex_search(text, *node.pattern))
      return violation("expected a string matching " + json(node.pattern_text).dump() + ", got " + describe(instance));
  }
  if (instance.is_array()) {
    if (node.min_items && instance.size() < *node.min_items)
      return violation("expected at least " + std::to_string(*node.min_items) + " items, got " + describe(instance));
    if (node.max_items && instance.size() > *node.max_items)
      return violation("expected at most " + std::to_string(*node.max_items) + " items, got " + describe(instance));
    if (node.items)
      for (size_t i = 0; i < instance.size(); ++i)
        if (auto v = check(*node.items, instance[i], pointer + "/" + std::to_string(i))) return v;
  }
  if (instance.is_object()) {
    for (const auto& name : node.required)
      if (!instance.contains(name))
        return SchemaViolation{pointer + "/" + json_pointer_token(name), "required property is missing"};
    for (const auto& [name, value] : instance.items()) {
      const std::string at = pointer + "/" + json_pointer_token(name);
      auto declared = std::find_if(node.properties.begin(), node.properties.end(),
                                   [&key = name](const auto& p) { return p.first == key; });
      if (declared != node.properties.end()) {
        if (auto v = check(*declared->second, value, at)) return v;
      } else if (node.additional_properties) {
        if (node.additional_properties->boolean == false)
          return SchemaViolation{at, "unexpected property (" + node.path + " allows only the properties it names)"};
        if (auto v = check(*node.additional_properties, value, at)) return v;
      }
    }
  }

  if (node.ref_target)
    if (auto v = check(*node.ref_target, instance, pointer)) return v;
  for (const Node* sub : node.all_of)
    if (auto v = check(*sub, instance, pointer)) return v;
  if (node.if_schema) {
    const bool holds = !check(*node.if_schema, instance, pointer);
    const Node* branch = holds ? node.then_schema : node.else_schema;
    if (branch) {
      if (auto v = check(*branch, instance, pointer)) {
        if (holds && !node.if_schema->description.empty())
          v->message += " (when " + node.if_schema->description + ")";
        else
          v->message += " (by " + branch->path + ")";
        return v;
      }
    }
  }
  return std::nullopt;
}

}  // namespace fsdpp::results
