// `fsdpp plan` from the command line: what it prints and writes, and one line with exit 2
// for each kind of bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "core/models/presets.h"
#include "core/plan/plan_document.h"
#include "harness/testing/temp_dir.h"
#include "suites/cli/fsdpp_binary.h"

namespace fsdpp {
namespace {

using harness::run_shell;
using ::testing::HasSubstr;

int line_count(const std::string& s) {
  int n = 0;
  for (char ch : s) n += ch == '\n';
  return n;
}

TEST(PlanCommand, PrintsEachPartOfThePlanAndWritesAVersionedDocument) {
  harness::TempDir dir;
  const auto out = (dir.path() / "plan.json").string();
  auto [code, output] = run_shell(kFsdpp +
                                  " plan --model-type llama --model-size 1B --nproc 8 --mixed-precision bf16 "
                                  "--activation-checkpointing --batch-size 2 --seq-len 2048 --gpu-memory h100 --json " +
                                  out + " 2>&1");
  ASSERT_EQ(code, 0) << output;
  for (const char* part :
       {"parameter shards", "gradient shards", "optimizer state", "fp32 masters", "unsharded units", "activations",
        "all-gather buffer", "predicted peak", "bytes sent per step", "step time", "assumed: matmul"})
    EXPECT_THAT(output, HasSubstr(part));
  std::ifstream in(out);
  auto doc = nlohmann::json::parse(in);
  EXPECT_NO_THROW(plan::check_plan_document(doc, out));
  EXPECT_EQ(doc["config"]["world_size"], 8);
  EXPECT_GT(doc["comm_bytes_per_step"]["all_gather"].get<int64_t>(), 0);
  // A GPU plan takes the fused loss: the saved bf16 logits and their bf16 gradient.
  EXPECT_EQ(doc["config"]["cross_entropy"], "fused");
  EXPECT_EQ(doc["transient_bytes"]["logits"].get<int64_t>(), int64_t{2} * 2048 * 128256 * 2 * 2);
  doc["version"] = 2;
  EXPECT_THROW(plan::check_plan_document(doc, out), std::invalid_argument);
}

TEST(PlanCommand, FitPrintsTheTrainFlagsOfTheFastestThatFitsAndWhyEveryOtherLost) {
  auto [code, output] = run_shell(kFsdpp +
                                  " plan --fit --model-type llama --model-size 7B --nproc 8 --mixed-precision bf16 "
                                  "--batch-size 8 --seq-len 4096 --gpu-memory h100 2>&1");
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("does not fit: peak"));
  EXPECT_THAT(output, HasSubstr("slower: "));
  EXPECT_THAT(output, HasSubstr("fsdpp train --from-scratch --model-type llama --model-size 7B --nproc 8"));
}

TEST(PlanCommand, AHuggingFaceFolderPlansAsItsPresetDoes) {
  harness::TempDir dir;
  std::ofstream(dir.path() / "config.json") << models::from_scratch_config("llama", "tiny").dump();
  const std::string flags = " --nproc 3 --mixed-precision bf16 --batch-size 2 --seq-len 32 2>&1";
  auto [code, folder] = run_shell(kFsdpp + " plan --model " + dir.path().string() + flags);
  ASSERT_EQ(code, 0) << folder;
  auto [preset_code, preset] = run_shell(kFsdpp + " plan --model-type llama --model-size tiny" + flags);
  ASSERT_EQ(preset_code, 0) << preset;
  // Everything after the first line (which names the model) is the same.
  EXPECT_EQ(folder.substr(folder.find('\n')), preset.substr(preset.find('\n')));
}

void expect_one_line_exit_2(const std::string& args, const std::string& names) {
  auto [code, output] = run_shell(kFsdpp + " plan " + args + " 2>&1");
  EXPECT_EQ(code, 2) << output;
  EXPECT_EQ(line_count(output), 1) << output;
  EXPECT_THAT(output, HasSubstr(names)) << output;
}

TEST(PlanCommand, AnUnknownModelSizeIsOneLineNamingTheFlag) {
  expect_one_line_exit_2("--model-type llama --model-size 71B", "--model-size '71B'");
}

TEST(PlanCommand, AShardGroupThatDoesNotDivideTheWorldIsOneLine) {
  expect_one_line_exit_2(
      "--model-type llama --model-size 7B --nodes 3 --nproc 8 --strategy hybrid_shard "
      "--hybrid-shard-size 16",
      "does not divide the world of 24");
}

TEST(PlanCommand, AMemoryNoConfigurationFitsIsOneLineNamingTheFlag) {
  expect_one_line_exit_2("--model-type gpt2 --model-size 124M --gpu-memory 1kb", "--gpu-memory 1kb");
}

TEST(PlanCommand, AMemoryThatDoesNotParseIsOneLineNamingTheFlag) {
  expect_one_line_exit_2("--model-type gpt2 --model-size 124M --gpu-memory 80XB", "--gpu-memory '80XB'");
  expect_one_line_exit_2("--model-type gpt2 --model-size 124M --gpu-memory lots", "--gpu-memory 'lots'");
}

TEST(PlanCommand, AModelNamedTwiceOrNotAtAllIsOneLine) {
  expect_one_line_exit_2("--seq-len 128", "--model-type and --model-size, or with --model DIR");
  expect_one_line_exit_2("--model-type gpt2 --model-size 124M --model /nonexistent", "one of them");
}

TEST(PlanCommand, AMissingModelFolderIsOneLineNamingIt) {
  expect_one_line_exit_2("--model /nonexistent/folder", "/nonexistent/folder");
}

}  // namespace
}  // namespace fsdpp
