// harness/results/json_schema.cpp against the official JSON-Schema-Test-Suite (Debian's
// json-schema-test-suite 2.0.0, which ci/setup.sh installs; $FSDPP_JSON_SCHEMA_TEST_SUITE
// names another copy's tests/ folder). That release's newest draft is draft 7, the closest
// to the draft 2020-12 subset the validator implements: for the keywords it supports the
// two drafts agree except where a rule below says so.
//
// Every case of every file listed for a supported keyword runs, and each of its tests must
// get the suite's `valid`. A case is skipped only by one of these rules:
//  - "draft-7-only": the case is listed in kDraft7OnlyCases (draft 7 semantics that draft
//    2020-12 changed); it is not run.
//  - "unsupported keyword", "non-pointer $ref" (other documents, anchors), "$id below the
//    root" (embedded resources), "items array" (draft 7 tuples, prefixItems in 2020-12):
//    the case's schema uses something outside the supported set.
//  - "then/else without if": the specification ignores them; the validator refuses them
//    by design, as a keyword with no effect is likely a mistake in our own schemas.
//  For these the validator must refuse the schema, naming what it refused; that is checked.
// One translation applies before the rules: draft 7's `definitions` is draft 2020-12's
// `$defs` (renamed in draft 2019-09), so the keyword and the "#/definitions/" prefix of
// $refs are renamed; such cases are counted as "renamed".
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "harness/results/json_schema.h"

namespace fsdpp::results {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kDefaultSuiteTests = "/usr/share/json-schema-test-suite/tests";
constexpr const char* kDraft = "draft7";

// The suite's files for each supported keyword. The annotations ($schema, $id, $comment,
// title, description) have no file in draft 7: they appear inside the other files' cases.
const std::map<std::string, std::vector<std::string>>& keyword_files() {
  static const std::map<std::string, std::vector<std::string>> files = {
      {"$schema", {}},
      {"$id", {}},
      {"$comment", {}},
      {"title", {}},
      {"description", {}},
      {"$defs", {"definitions.json"}},
      {"$ref", {"ref.json", "refRemote.json"}},
      {"type", {"type.json", "optional/zeroTerminatedFloats.json", "optional/bignum.json"}},
      {"enum", {"enum.json"}},
      {"const", {"const.json"}},
      {"required", {"required.json"}},
      {"properties", {"properties.json"}},
      {"additionalProperties", {"additionalProperties.json"}},
      {"items", {"items.json"}},
      {"minItems", {"minItems.json"}},
      {"maxItems", {"maxItems.json"}},
      {"minimum", {"minimum.json", "optional/bignum.json"}},
      {"maximum", {"maximum.json", "optional/bignum.json"}},
      {"minLength", {"minLength.json"}},
      {"pattern", {"pattern.json"}},
      {"allOf", {"allOf.json"}},
      {"if", {"if-then-else.json"}},
      {"then", {"if-then-else.json"}},
      {"else", {"if-then-else.json"}},
  };
  return files;
}

// Boolean schemas are no keyword but a supported feature with a file of their own.
const std::vector<std::string> kFeatureFiles = {"boolean_schema.json"};

// (file, case description): draft 7 ignores the siblings of $ref; draft 2020-12 applies
// them (Core 2020-12, 8.2.3.1), and so does the validator.
const std::set<std::pair<std::string, std::string>> kDraft7OnlyCases = {
    {"ref.json", "ref overrides any sibling keywords"},
};

fs::path suite_tests_dir() {
  const char* override_dir = std::getenv("FSDPP_JSON_SCHEMA_TEST_SUITE");
  return override_dir && *override_dir ? fs::path(override_dir) : fs::path(kDefaultSuiteTests);
}

std::string missing_suite_line() {
  return "JSON-Schema-Test-Suite not found: no " + (suite_tests_dir() / kDraft).string() +
         " (install the Debian package json-schema-test-suite: bash ci/setup.sh; or set "
         "FSDPP_JSON_SCHEMA_TEST_SUITE to its tests/ folder)";
}

// Calls visit(subschema, pointer) for `schema` and every subschema under it, wherever
// draft 7 or draft 2020-12 puts one.
template <typename Visit>
void for_each_schema(json& schema, const std::string& pointer, Visit&& visit) {
  visit(schema, pointer);
  if (!schema.is_object()) return;
  static const std::set<std::string> kMapOfSchemas = {"properties", "patternProperties", "definitions",
                                                      "$defs",      "dependencies",      "dependentSchemas"};
  static const std::set<std::string> kOneSchema = {
      "additionalProperties", "additionalItems",      "items", "contains", "propertyNames", "not", "if", "then", "else",
      "unevaluatedItems",     "unevaluatedProperties"};
  static const std::set<std::string> kArrayOfSchemas = {"allOf", "anyOf", "oneOf", "items", "prefixItems"};
  for (auto& [key, value] : schema.items()) {
    const std::string at = pointer + "/" + json_pointer_token(key);
    if (kMapOfSchemas.count(key) && value.is_object()) {
      for (auto& [name, sub] : value.items())
        if (sub.is_object() || sub.is_boolean()) for_each_schema(sub, at + "/" + json_pointer_token(name), visit);
    } else if (kArrayOfSchemas.count(key) && value.is_array()) {
      for (size_t i = 0; i < value.size(); ++i) for_each_schema(value[i], at + "/" + std::to_string(i), visit);
    } else if (kOneSchema.count(key) && (value.is_object() || value.is_boolean())) {
      for_each_schema(value, at, visit);
    }
  }
}

// The translation: draft 7's `definitions` becomes `$defs`. True when anything changed.
bool rename_definitions(json& schema) {
  bool renamed = false;
  for_each_schema(schema, "#", [&](json& node, const std::string&) {
    if (!node.is_object()) return;
    if (node.contains("definitions") && !node.contains("$defs")) {
      node["$defs"] = std::move(node["definitions"]);
      node.erase("definitions");
      renamed = true;
    }
    if (node.contains("$ref") && node["$ref"].is_string()) {
      std::string ref = node["$ref"].get<std::string>();
      if (ref.rfind("#/definitions/", 0) == 0) {
        node["$ref"] = "#/$defs/" + ref.substr(14);
        renamed = true;
      }
    }
  });
  return renamed;
}

// What the case's schema uses outside the supported set: (rule, text the validator's
// refusal must contain). Empty when the validator must accept the schema.
std::vector<std::pair<std::string, std::string>> unsupported_features(json schema) {
  std::vector<std::pair<std::string, std::string>> found;
  const auto& supported = JsonSchema::supported_keywords();
  for_each_schema(schema, "#", [&](json& node, const std::string& pointer) {
    if (!node.is_object()) return;
    for (auto& [key, value] : node.items()) {
      if (std::find(supported.begin(), supported.end(), key) == supported.end())
        found.push_back(
            {"unsupported keyword", pointer + "/" + json_pointer_token(key) + ": unsupported keyword \"" + key + "\""});
    }
    if (node.contains("$ref") && node["$ref"].is_string()) {
      const std::string ref = node["$ref"].get<std::string>();
      if (ref != "#" && ref.rfind("#/", 0) != 0) found.push_back({"non-pointer $ref", pointer + "/$ref: "});
    }
    if (node.contains("$id") && pointer != "#") found.push_back({"$id below the root", pointer + "/$id: "});
    if (node.contains("items") && node["items"].is_array()) found.push_back({"items array", pointer + "/items: "});
    if ((node.contains("then") || node.contains("else")) && !node.contains("if"))
      found.push_back({"then/else without if", pointer + ": \"then\"/\"else\" without \"if\""});
  });
  return found;
}

struct FileCounts {
  int cases_run = 0, tests_run = 0, renamed = 0;
  std::map<std::string, int> skipped;  // rule -> cases
};

class JsonSchemaTestSuite : public ::testing::TestWithParam<std::string> {};

TEST_P(JsonSchemaTestSuite, EveryCaseGetsTheSuitesVerdictOrIsRefusedByARule) {
  const fs::path file = suite_tests_dir() / kDraft / GetParam();
  if (!fs::is_directory(suite_tests_dir() / kDraft)) GTEST_FAIL() << missing_suite_line();
  std::ifstream in(file);
  ASSERT_TRUE(in) << file.string() << ": cannot open (is the suite's " << kDraft << " complete?)";
  const json cases = json::parse(in);
  ASSERT_TRUE(cases.is_array() && !cases.empty()) << file.string() << ": expected an array of cases";

  FileCounts counts;
  for (const auto& test_case : cases) {
    const std::string description = test_case.at("description").get<std::string>();
    const std::string where = file.filename().string() + ": \"" + description + "\"";
    if (kDraft7OnlyCases.count({GetParam(), description})) {
      ++counts.skipped["draft-7-only"];
      continue;
    }
    json schema = test_case.at("schema");
    const bool renamed = rename_definitions(schema);

    const auto features = unsupported_features(schema);
    if (!features.empty()) {
      // The validator must refuse the schema and name one of the things it does not support.
      std::string refusal;
      try {
        JsonSchema compiled(schema, "suite-case");
        refusal = "(compiled)";
      } catch (const std::invalid_argument& e) {
        refusal = e.what();
      }
      bool named = false;
      for (const auto& [rule, text] : features) named = named || refusal.find(text) != std::string::npos;
      EXPECT_TRUE(named) << where << ": expected a refusal containing \"" << features.front().second << "\" ("
                         << features.front().first << "), got: " << refusal;
      ++counts.skipped[features.front().first];
      continue;
    }

    std::optional<JsonSchema> compiled;
    try {
      compiled.emplace(schema, "suite-case");
    } catch (const std::invalid_argument& e) {
      ADD_FAILURE() << where << ": refused a schema within the supported set: " << e.what();
      continue;
    }
    ++counts.cases_run;
    counts.renamed += renamed ? 1 : 0;
    for (const auto& test : test_case.at("tests")) {
      ++counts.tests_run;
      const bool expected_valid = test.at("valid").get<bool>();
      const auto violation = compiled->first_violation(test.at("data"));
      EXPECT_EQ(!violation.has_value(), expected_valid)
          << where << ", test \"" << test.at("description").get<std::string>() << "\": data " << test.at("data").dump()
          << " should be " << (expected_valid ? "valid" : "invalid")
          << (violation ? ", got: " + violation->to_string() : std::string(", got: valid"));
    }
  }

  std::string skipped;
  int skipped_cases = 0;
  for (const auto& [rule, n] : counts.skipped) {
    skipped += (skipped.empty() ? "" : ", ") + std::to_string(n) + " " + rule;
    skipped_cases += n;
  }
  std::cout << "[suite " << kDraft << "] " << GetParam() << ": " << counts.cases_run << " cases ran ("
            << counts.tests_run << " tests"
            << (counts.renamed ? ", " + std::to_string(counts.renamed) + " renamed" : "") << "), " << skipped_cases
            << " skipped" << (skipped.empty() ? "" : " (" + skipped + ")") << "\n";
}

std::vector<std::string> suite_files() {
  std::set<std::string> files(kFeatureFiles.begin(), kFeatureFiles.end());
  for (const auto& [keyword, names] : keyword_files()) files.insert(names.begin(), names.end());
  return {files.begin(), files.end()};
}

// "optional/bignum.json" -> "optional_bignum"
std::string test_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param.substr(0, info.param.rfind(".json"));
  for (char& c : name)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Draft7, JsonSchemaTestSuite, ::testing::ValuesIn(suite_files()), test_name);

TEST(JsonSchemaTestSuiteCoverage, EverySupportedKeywordIsMappedToTheSuitesFiles) {
  if (!fs::is_directory(suite_tests_dir() / kDraft)) GTEST_FAIL() << missing_suite_line();
  for (const auto& keyword : JsonSchema::supported_keywords()) {
    auto it = keyword_files().find(keyword);
    ASSERT_NE(it, keyword_files().end()) << "supported keyword \"" << keyword << "\" has no entry in keyword_files()";
    for (const auto& name : it->second)
      EXPECT_TRUE(fs::is_regular_file(suite_tests_dir() / kDraft / name))
          << (suite_tests_dir() / kDraft / name).string() << ": missing (keyword \"" << keyword << "\")";
  }
  EXPECT_EQ(keyword_files().size(), JsonSchema::supported_keywords().size())
      << "keyword_files() lists a keyword the validator does not support";
}

}  // namespace
}  // namespace fsdpp::results
