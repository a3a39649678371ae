// The JSON Schema subset behind results/schema/v1.json: each keyword accepts and rejects
// what draft 2020-12 says, violations name the instance's JSON pointer, and a schema with
// a keyword the validator does not know is refused instead of accepting everything.
#include "harness/results/json_schema.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>

namespace fsdpp::results {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

// The violation message for `instance`, or "valid".
std::string verdict(const json& schema, const json& instance) {
  auto violation = JsonSchema(schema, "test-schema").first_violation(instance);
  return violation ? violation->to_string() : "valid";
}

std::string compile_error(const json& schema) {
  try {
    JsonSchema compiled(schema, "test-schema");
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "compiled";
}

TEST(JsonSchemaCompile, UnsupportedKeywordIsRefusedInOneLineNamingItAndItsSchemaPointer) {
  EXPECT_THAT(compile_error(json::parse(R"({"type": "object", "requried": ["a"]})")),
              HasSubstr("test-schema: #/requried: unsupported keyword \"requried\""));
  EXPECT_THAT(compile_error(json::parse(R"({"properties": {"a": {"minimun": 1}}})")),
              HasSubstr("#/properties/a/minimun: unsupported keyword \"minimun\""));
  EXPECT_THAT(compile_error(json::parse(R"({"$defs": {"x": {"patternProperties": {}}}})")),
              HasSubstr("#/$defs/x/patternProperties: unsupported keyword \"patternProperties\""));
  // Real keywords of draft 2020-12 that this validator does not implement are refused too,
  // however deep, instead of being ignored.
  const std::string deep = compile_error(
      json::parse(R"({"allOf": [{"if": {"properties": {"n": {"exclusiveMinimum": 0}}}, "then": true}]})"));
  EXPECT_EQ(deep.rfind("test-schema: #/allOf/0/if/properties/n/exclusiveMinimum: unsupported keyword "
                       "\"exclusiveMinimum\" (this validator supports only: ",
                       0),
            0u)
      << deep;
  EXPECT_EQ(deep.find('\n'), std::string::npos) << deep;
  for (const char* keyword : {"anyOf", "oneOf", "not", "format", "maxLength", "uniqueItems", "prefixItems",
                              "definitions", "$anchor", "default"})
    EXPECT_THAT(compile_error({{keyword, json::object()}}),
                HasSubstr(std::string("#/") + keyword + ": unsupported keyword \"" + keyword + "\""));
}

TEST(JsonSchemaCompile, ReferencesOutsideThisDocumentAndEmbeddedResourcesAreRefused) {
  EXPECT_THAT(compile_error(json::parse(R"({"$ref": "other.json#/$defs/a"})")),
              HasSubstr("#/$ref: expected a JSON pointer into this document"));
  EXPECT_THAT(compile_error(json::parse(R"({"$ref": "#anchor"})")),
              HasSubstr("#/$ref: expected a JSON pointer into this document"));
  EXPECT_THAT(compile_error(json::parse(R"({"$id": "https://x.invalid/a", "items": {"$id": "b"}})")),
              HasSubstr("#/items/$id: \"$id\" below the root"));
  EXPECT_THAT(compile_error(json::parse(R"({"$ref": "#/$defs/a%2"})")), HasSubstr("two hex digits"));
}

TEST(JsonSchemaRef, PercentEncodedAndEscapedPointerTokensResolve) {
  const json schema = json::parse(R"({
    "$defs": {"per%cent": {"type": "integer"}, "sl/ash": {"type": "string"}},
    "properties": {"p": {"$ref": "#/$defs/per%25cent"}, "s": {"$ref": "#/$defs/sl~1ash"}}})");
  EXPECT_EQ(verdict(schema, json::parse(R"({"p": 1, "s": "x"})")), "valid");
  EXPECT_EQ(verdict(schema, json::parse(R"({"p": "1"})")), "/p: expected integer, got string \"1\"");
  EXPECT_EQ(verdict(schema, json::parse(R"({"s": 1})")), "/s: expected string, got integer 1");
}

TEST(JsonSchemaCompile, MalformedKeywordValuesAreRefused) {
  EXPECT_THAT(compile_error(json::parse(R"({"$ref": "#/$defs/missing"})")),
              HasSubstr("#/$ref: \"#/$defs/missing\" is not a schema in this document"));
  EXPECT_THAT(compile_error(json::parse(R"({"then": {"required": ["a"]}})")), HasSubstr("without \"if\""));
  EXPECT_THAT(compile_error(json::parse(R"({"pattern": "(unclosed"})")), HasSubstr("#/pattern: invalid regular"));
  EXPECT_THAT(compile_error(json::parse(R"({"type": "float"})")), HasSubstr("#/type: expected type names"));
  EXPECT_THAT(compile_error(json::parse(R"({"required": "a"})")), HasSubstr("#/required: expected an array"));
  EXPECT_THAT(compile_error(json::parse(R"({"minItems": -1})")), HasSubstr("#/minItems: expected a non-negative"));
  EXPECT_THAT(compile_error(json::parse(R"({"items": [{"type": "string"}]})")), HasSubstr("prefixItems"));
  EXPECT_THAT(compile_error(json(3)), HasSubstr("#: a schema must be an object or a boolean"));
}

TEST(JsonSchemaType, IntegerAcceptsWholeFloatsAndNumberRejectsNonFinite) {
  const json schema = {{"type", "integer"}};
  EXPECT_EQ(verdict(schema, json(2)), "valid");
  EXPECT_EQ(verdict(schema, json(2.0)), "valid");
  EXPECT_EQ(verdict(schema, json(2.5)), "(document): expected integer, got number 2.5");
  EXPECT_EQ(verdict({{"type", "number"}}, json(std::numeric_limits<double>::quiet_NaN())),
            "(document): expected number, got NaN");
  EXPECT_EQ(verdict({{"type", json::array({"string", "null"})}}, json(nullptr)), "valid");
  EXPECT_EQ(verdict({{"type", json::array({"string", "null"})}}, json(true)),
            "(document): expected string or null, got boolean true");
}

TEST(JsonSchemaObject, RequiredPropertiesAndAdditionalPropertiesNameTheProperty) {
  const json schema = json::parse(R"({
    "type": "object", "required": ["a"], "additionalProperties": false,
    "properties": {"a": {"type": "object", "additionalProperties": {"type": "string"}}, "a/b": {"const": 1}}})");
  EXPECT_EQ(verdict(schema, json::parse(R"({"a": {"x": "y"}})")), "valid");
  EXPECT_EQ(verdict(schema, json::object()), "/a: required property is missing");
  EXPECT_THAT(verdict(schema, json::parse(R"({"a": {}, "b": 1})")), HasSubstr("/b: unexpected property"));
  EXPECT_EQ(verdict(schema, json::parse(R"({"a": {"x": 3}})")), "/a/x: expected string, got integer 3");
  EXPECT_EQ(verdict(schema, json::parse(R"({"a": {}, "a/b": 2})")), "/a~1b: expected 1, got integer 2");
}

TEST(JsonSchemaArray, ItemsAndCountsNameTheElement) {
  const json schema = json::parse(R"({"type": "array", "minItems": 1, "maxItems": 3, "items": {"minimum": 0}})");
  EXPECT_EQ(verdict(schema, json::parse("[0, 1.5]")), "valid");
  EXPECT_EQ(verdict(schema, json::array()), "(document): expected at least 1 items, got array of 0 items");
  EXPECT_EQ(verdict(schema, json::parse("[1, 2, 3, 4]")), "(document): expected at most 3 items, got array of 4 items");
  EXPECT_EQ(verdict(schema, json::parse("[1, -2]")), "/1: expected a number >= 0, got integer -2");
}

TEST(JsonSchemaString, PatternSearchesUnanchoredAndMinLengthCountsCharacters) {
  EXPECT_EQ(verdict({{"pattern", "b+"}}, json("abba")), "valid");
  EXPECT_THAT(verdict({{"pattern", "^b+$"}}, json("abba")), HasSubstr("expected a string matching \"^b+$\""));
  EXPECT_EQ(verdict({{"minLength", 2}}, json("\xc3\xa9")),
            "(document): expected a string of at least 2 characters, "
            "got string \"\xc3\xa9\"");
  EXPECT_EQ(verdict({{"minLength", 2}}, json("\xc3\xa9x")), "valid");
  EXPECT_EQ(verdict({{"pattern", "^a$"}}, json(5)), "valid");  // pattern applies to strings only
}

TEST(JsonSchemaEnumConst, ListWhatIsAllowed) {
  EXPECT_EQ(verdict({{"enum", {"ok", "failed", nullptr}}}, json("done")),
            "(document): expected one of \"ok\", \"failed\", null, got string \"done\"");
  EXPECT_EQ(verdict({{"enum", {"ok", "failed", nullptr}}}, json(nullptr)), "valid");
  EXPECT_EQ(verdict({{"const", 1}}, json(1.0)), "valid");
  EXPECT_EQ(verdict({{"const", 1}}, json("1")), "(document): expected 1, got string \"1\"");
}

TEST(JsonSchemaConditional, ThenAppliesWhenIfHoldsAndElseOtherwise) {
  const json schema = json::parse(R"({
    "if": {"description": "kind is b", "properties": {"kind": {"const": "b"}}},
    "then": {"required": ["b"]},
    "else": {"required": ["a"]}})");
  EXPECT_EQ(verdict(schema, json::parse(R"({"kind": "b", "b": 1})")), "valid");
  EXPECT_EQ(verdict(schema, json::parse(R"({"kind": "b"})")), "/b: required property is missing (when kind is b)");
  EXPECT_EQ(verdict(schema, json::parse(R"({"kind": "c", "a": 1})")), "valid");
  EXPECT_EQ(verdict(schema, json::parse(R"({"kind": "c"})")), "/a: required property is missing (by #/else)");
}

TEST(JsonSchemaRef, ResolvesDefsAndRecursesThroughTheRoot) {
  const json schema = json::parse(R"({
    "type": "object", "required": ["v"],
    "properties": {"v": {"$ref": "#/$defs/positive"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
    "$defs": {"positive": {"type": "integer", "minimum": 1}}})");
  EXPECT_EQ(verdict(schema, json::parse(R"({"v": 1, "kids": [{"v": 2, "kids": [{"v": 3}]}]})")), "valid");
  EXPECT_EQ(verdict(schema, json::parse(R"({"v": 1, "kids": [{"v": 2, "kids": [{"v": 0}]}]})")),
            "/kids/0/kids/0/v: expected a number >= 1, got integer 0");
}

TEST(JsonSchemaBoolean, FalseRejectsAndTrueAccepts) {
  EXPECT_THAT(verdict(json(false), json(1)), HasSubstr("(document): no value is allowed here"));
  EXPECT_EQ(verdict(json(true), json::parse(R"({"anything": [1, "x"]})")), "valid");
  EXPECT_THAT(verdict({{"allOf", {json(true), {{"type", "string"}}}}}, json(1)),
              HasSubstr("(document): expected string"));
}

}  // namespace
}  // namespace fsdpp::results
