// Every JSON reader of untrusted bytes refuses nesting past io::kMaxJsonNestingDepth with
// its own one-line error naming the file, instead of overflowing the stack later (copying,
// printing or comparing a value recurses once per level). suites/fuzz/README.md found
// these: `fsdpp checkpoint inspect` crashed on an 800 KB index.json of nested brackets.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "core/checkpoint/checkpoint_index.h"
#include "core/io/hf_config.h"
#include "core/io/json_depth.h"
#include "core/io/yaml_json.h"
#include "core/tokenizer/load.h"
#include "harness/results/results_document.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp {
namespace {

using ::testing::HasSubstr;

struct DeepReader {
  std::string name;
  std::string file;  // the file name the reader expects
  std::function<void(const std::filesystem::path&)> read;
};

class DeepJson : public ::testing::TestWithParam<DeepReader> {};

TEST_P(DeepJson, NestingPastTheLimitIsOneErrorNamingTheFile) {
  harness::TempDir dir;
  const auto path = dir.path() / GetParam().file;
  // 200,000 levels: far past the limit, and deep enough to overflow an 8 MiB stack when
  // a value this deep is printed or copied recursively.
  const size_t levels = 200000;
  {
    std::ofstream out(path);
    out << "{\"model_type\": " << std::string(levels, '[') << std::string(levels, ']') << "}";
  }
  try {
    GetParam().read(path);
    FAIL() << GetParam().name << " accepted JSON nested " << levels << " levels deep";
  } catch (const std::exception& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, HasSubstr(path.filename().string())) << GetParam().name;
    EXPECT_THAT(message, HasSubstr("nested deeper than " + std::to_string(io::kMaxJsonNestingDepth)))
        << GetParam().name;
    EXPECT_EQ(message.find('\n'), std::string::npos) << "one line: " << message;
  }
}

TEST_P(DeepJson, NestingAtTheLimitIsNotRefusedForItsDepth) {
  harness::TempDir dir;
  const auto path = dir.path() / GetParam().file;
  {
    std::ofstream out(path);
    out << "{\"model_type\": " << std::string(io::kMaxJsonNestingDepth - 1, '[')
        << std::string(io::kMaxJsonNestingDepth - 1, ']') << "}";
  }
  try {
    GetParam().read(path);
  } catch (const std::exception& e) {  // refused for its content, never for its depth
    EXPECT_THAT(std::string(e.what()), ::testing::Not(HasSubstr("nested deeper"))) << GetParam().name;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Readers, DeepJson,
    ::testing::Values(
        DeepReader{"HfConfig", "config.json", [](const auto& p) { io::load_hf_config(p); }},
        DeepReader{"CheckpointIndex", "index.json", [](const auto& p) { checkpoint::CheckpointIndex::read(p); }},
        DeepReader{"ResultsDocument", "results.json", [](const auto& p) { results::load_results(p); }},
        DeepReader{"TokenizerJson", "tokenizer.json", [](const auto& p) { tokenizer::load_tokenizer(p); }},
        DeepReader{"ConfigFile", "train.json", [](const auto& p) { io::load_json_or_yaml_file(p); }}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fsdpp
