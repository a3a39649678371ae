// YAML and JSON text as JSON values: YAML 1.2 core-schema scalars, order-keeping
// variants, one-document vs all-documents, and errors naming the source and line.
#include "core/io/yaml_json.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>

#include "harness/testing/temp_dir.h"

namespace fsdpp::io {
namespace {

using nlohmann::json;
using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(YamlToJson, PlainScalarsResolveWithTheCoreSchemaAndQuotedOnesStayStrings) {
  const auto j = yaml_to_json(
      "int: 12\nneg: -3\nhex: 0x1F\noct: 0o17\nfloat: -2.5e1\nhalf: .5\nyes_true: true\nno: False\n"
      "null1: null\nnull2: ~\nempty:\nquoted: '12'\ndquoted: \"true\"\nyes: yes\nversion: 1.2.3\ninf: .inf\n"
      "tagged: !!str 7\nbig: 18446744073709551615\n",
      "cfg.yaml");
  EXPECT_EQ(j["int"], json(12));
  EXPECT_TRUE(j["int"].is_number_integer());
  EXPECT_EQ(j["neg"], json(-3));
  EXPECT_EQ(j["hex"], json(31));
  EXPECT_EQ(j["oct"], json(15));
  EXPECT_EQ(j["float"], json(-25.0));
  EXPECT_EQ(j["half"], json(0.5));
  EXPECT_EQ(j["yes_true"], json(true));
  EXPECT_EQ(j["no"], json(false));
  EXPECT_TRUE(j["null1"].is_null());
  EXPECT_TRUE(j["null2"].is_null());
  EXPECT_TRUE(j["empty"].is_null());
  EXPECT_EQ(j["quoted"], json("12"));
  EXPECT_EQ(j["dquoted"], json("true"));
  EXPECT_EQ(j["yes"], json("yes"));  // YAML 1.1's booleans are strings in 1.2
  EXPECT_EQ(j["version"], json("1.2.3"));
  EXPECT_EQ(j["inf"], json(".inf"));
  EXPECT_EQ(j["tagged"], json("7"));
  EXPECT_EQ(j["big"].get<uint64_t>(), 18446744073709551615ull);
}

TEST(YamlToJson, MappingsSequencesAndBlockScalarsNest) {
  const auto j = yaml_to_json(
      "model:\n  layers: [1, 2]\n  name: gpt\n  notes: |\n    line one\n    line two\n"
      "list:\n  - a: 1\n  - b\n",
      "cfg.yaml");
  EXPECT_EQ(j, json::parse(R"({"model": {"layers": [1, 2], "name": "gpt", "notes": "line one\nline two\n"},
                               "list": [{"a": 1}, "b"]})"));
}

TEST(YamlToJson, OrderedJsonKeepsTheKeysAsWritten) {
  const auto j = yaml_to_json<nlohmann::ordered_json>("zeta: 1\nalpha: 2\nmid: 3\n", "x.yaml");
  std::vector<std::string> keys;
  for (const auto& item : j.items()) keys.push_back(item.key());
  EXPECT_THAT(keys, ::testing::ElementsAre("zeta", "alpha", "mid"));
}

TEST(YamlToJson, SeveralDocumentsNeedTheAllDocumentsFunction) {
  const std::string text = "a: 1\n---\nb: 2\n";
  EXPECT_THAT([&] { yaml_to_json(text, "two.yaml"); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                                           AllOf(HasSubstr("two.yaml:"), HasSubstr("expected one"))));
  EXPECT_EQ(yaml_documents_to_json(text, "two.yaml"), json::parse(R"([{"a": 1}, {"b": 2}])"));
  EXPECT_TRUE(yaml_to_json("", "empty.yaml").is_null());
}

TEST(YamlToJson, InvalidYamlNamesTheSourceAndLine) {
  EXPECT_THAT([] { yaml_to_json("a: ok\nb: [1, 2\nc: 3\n", "cfg.yaml"); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  AllOf(::testing::ContainsRegex("cfg\\.yaml:[0-9]+"), HasSubstr("invalid YAML"))));
  EXPECT_THAT([] { yaml_to_json("a: 1\nb: 2\na: 3\n", "cfg.yaml"); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr("cfg.yaml:3:1: duplicate key 'a'")));
  EXPECT_THAT([] { yaml_to_json("? [1, 2]\n: x\n", "cfg.yaml"); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  AllOf(::testing::ContainsRegex("cfg\\.yaml:[0-9]+"), HasSubstr("mapping key is not a scalar"))));
}

TEST(LoadJsonOrYamlFile, ReadsEitherFormatByExtension) {
  harness::TempDir dir;
  std::ofstream(dir / "c.json") << R"({"lr": 0.001, "steps": 10, "model": {"name": "tiny"}})";
  std::ofstream(dir / "c.yml") << "lr: 0.001\nsteps: 10\nmodel:\n  name: tiny\n";
  EXPECT_EQ(load_json_or_yaml_file(dir / "c.json"), load_json_or_yaml_file(dir / "c.yml"));
}

TEST(LoadJsonOrYamlFile, ErrorsNameTheFileAndLine) {
  harness::TempDir dir;
  std::ofstream(dir / "bad.json") << "{\n  \"lr\": nope\n}";
  EXPECT_THAT([&] { load_json_or_yaml_file(dir / "bad.json"); },
              ::testing::ThrowsMessage<std::invalid_argument>(
                  AllOf(HasSubstr((dir / "bad.json").string() + ": invalid JSON"), HasSubstr("line 2"))));
  std::ofstream(dir / "bad.yaml") << "a: 1\n  b: 2\n";
  EXPECT_THAT([&] { load_json_or_yaml_file(dir / "bad.yaml"); },
              ::testing::ThrowsMessage<std::invalid_argument>(HasSubstr((dir / "bad.yaml").string() + ":2:")));
  std::ofstream(dir / "c.toml") << "a = 1\n";
  EXPECT_THAT(
      [&] { load_json_or_yaml_file(dir / "c.toml"); },
      ::testing::ThrowsMessage<std::runtime_error>(AllOf(HasSubstr("c.toml"), HasSubstr(".json, .yaml or .yml"))));
  EXPECT_THAT([&] { load_json_or_yaml_file(dir / "missing.yaml"); },
              ::testing::ThrowsMessage<std::runtime_error>(HasSubstr("missing.yaml: cannot read")));
}

}  // namespace
}  // namespace fsdpp::io
