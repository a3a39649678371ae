// A JSON Schema validator for the subset of draft 2020-12 that fsdpp's own schemas use
// (results/schema/v1.json). Deliberately closed: a schema with any other keyword is
// refused when it is compiled, in one line naming the keyword and its schema pointer, so a
// typo ("requried") or a keyword it does not implement ("exclusiveMinimum") cannot
// silently accept everything. Proven against the JSON-Schema-Test-Suite
// (suites/results/json_schema_suite_test.cpp).
//
// Supported keywords. Annotations (no effect): $schema, $id (at the root only: below it an
// embedded resource would change what "#" means), $comment, title, description.
// Applicators: $defs, $ref (a JSON pointer into the same document, "#" or "#/$defs/name",
// percent-encoding allowed; other documents and anchors are refused),
// properties, additionalProperties, items (one schema for every element), allOf,
// if/then/else. Assertions: type (a name or an array of names; "integer" accepts 2.0 as
// the specification says), enum, const, required, minItems, maxItems, minimum, maximum,
// minLength (UTF-8 code points), pattern (ECMAScript std::regex, unanchored search).
// Booleans are schemas (true accepts everything, false nothing). A "number" must be
// finite: JSON cannot carry NaN or infinities, so a document holding one cannot be written.
#pragma once

#include <nlohmann/json.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace fsdpp::results {

// Where an instance breaks its schema and what was expected there.
struct SchemaViolation {
  std::string pointer;  // JSON pointer into the instance ("" is the whole document)
  std::string message;  // e.g. `expected one of "ok", "failed", got "done"`
  // "<pointer or (document)>: <message>"
  std::string to_string() const;
};

class JsonSchema {
 public:
  // Compiles `schema`. Throws std::invalid_argument "<source>: <schema pointer>: <what>"
  // for unsupported keywords, keyword values of the wrong shape, invalid regexes, "then" or
  // "else" without "if", and $ref targets that are not subschemas of this document.
  JsonSchema(const nlohmann::json& schema, const std::string& source);
  ~JsonSchema();
  JsonSchema(JsonSchema&&) noexcept;
  JsonSchema& operator=(JsonSchema&&) noexcept;

  // The first violation in document order (depth first), or nullopt when `instance` is
  // valid.
  std::optional<SchemaViolation> first_violation(const nlohmann::json& instance) const;

  // Throws std::runtime_error "<source>: <pointer>: <message>" at the first violation.
  void validate(const nlohmann::json& instance, const std::string& source) const;

  // The keywords compile() accepts, for documentation and tests.
  static const std::vector<std::string>& supported_keywords();

 private:
  struct Node;
  struct Compiler;
  std::optional<SchemaViolation> check(const Node& node, const nlohmann::json& instance,
                                       const std::string& pointer) const;

  std::vector<std::unique_ptr<Node>> nodes_;  // nodes_[0] is the root
};

// `token` escaped for use in a JSON pointer ("~" -> "~0", "/" -> "~1").
std::string json_pointer_token(const std::string& token);

}  // namespace fsdpp::results
