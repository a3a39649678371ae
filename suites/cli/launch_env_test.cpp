// The fsdpp binary itself: started by hand under torchrun-style and SLURM-style
// environments it forms the same world; --nproc launches ranks itself; bad flags fail.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <fstream>
#include <regex>

#include "harness/launch/launcher.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp {
namespace {

using ::testing::HasSubstr;

const std::string kFsdpp = FSDPP_CLI_PATH;

// Runs one fsdpp process per rank with the given environment and returns the report.
harness::LaunchReport run_fsdpp(int n, const std::vector<std::string>& args,
                                const std::function<std::vector<std::pair<std::string, std::string>>(int)>& env) {
  harness::LaunchOptions options;
  options.budget = std::chrono::seconds(90);
  return harness::launch(
      n,
      [&](int rank) {
        harness::ProcessSpec spec;
        spec.argv = {kFsdpp};
        spec.argv.insert(spec.argv.end(), args.begin(), args.end());
        spec.env = env(rank);
        return spec;
      },
      options);
}

// The "world: ..." line a rank printed, minus the fields that differ per rank.
std::string world_line(const harness::RankResult& r) {
  for (const auto& line : r.output_tail)
    if (line.rfind("world: ", 0) == 0)
      return std::regex_replace(line, std::regex(" (rank|local_rank|source)=\\S+"), "");
  return "<none>";
}

bool printed(const harness::RankResult& r, const std::string& text) {
  for (const auto& line : r.output_tail)
    if (line.find(text) != std::string::npos) return true;
  return false;
}

const std::vector<std::string> kQuickSelfcheck = {"selfcheck", "--numel", "1001", "--iterations", "1"};

TEST(LaunchEnvironment, TorchrunAndSlurmVariablesFormTheSameWorld) {
  const int n = 3;
  int port = harness::reserve_free_port();
  auto torchrun = run_fsdpp(n, kQuickSelfcheck, [&](int rank) {
    return std::vector<std::pair<std::string, std::string>>{
        {"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(n)},    {"LOCAL_RANK", std::to_string(rank)},
        {"LOCAL_WORLD_SIZE", std::to_string(n)}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
  });
  ASSERT_TRUE(torchrun.ok()) << torchrun.summary();
  int port2 = harness::reserve_free_port();
  auto slurm = run_fsdpp(n, kQuickSelfcheck, [&](int rank) {
    return std::vector<std::pair<std::string, std::string>>{
        {"SLURM_PROCID", std::to_string(rank)}, {"SLURM_NTASKS", std::to_string(n)},
        {"SLURM_LOCALID", std::to_string(rank)}, {"SLURM_TASKS_PER_NODE", std::to_string(n)},
        {"SLURM_JOB_NODELIST", "127.0.0.1"},   {"MASTER_PORT", std::to_string(port)}};
  });
  ASSERT_TRUE(slurm.ok()) << slurm.summary();
  (void)port2;
  for (int r = 0; r < n; ++r) {
    EXPECT_THAT(torchrun.ranks[r].output_tail,
                ::testing::Contains(HasSubstr("world: rank=" + std::to_string(r) + " world_size=3 local_rank=" +
                                              std::to_string(r) + " local_world_size=3")));
    EXPECT_TRUE(printed(torchrun.ranks[r], "source=torchrun"));
    EXPECT_TRUE(printed(slurm.ranks[r], "source=slurm"));
    EXPECT_EQ(world_line(torchrun.ranks[r]), world_line(slurm.ranks[r])) << "rank " << r;
    EXPECT_EQ(world_line(torchrun.ranks[r]), world_line(torchrun.ranks[0]));
  }
  EXPECT_TRUE(printed(torchrun.ranks[0], "selfcheck: all 31 collectives correct on 3 ranks"));
  EXPECT_TRUE(printed(slurm.ranks[0], "selfcheck: all 31 collectives correct on 3 ranks"));
}

using harness::run_shell;

TEST(LaunchCommand, NprocSpawnsRanksThatPassTheSelfcheck) {
  auto [code, output] = run_shell(kFsdpp + " selfcheck --nproc 2 --numel 2001 --iterations 1");
  EXPECT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("[rank 1] world: rank=1 world_size=2"));
  EXPECT_THAT(output, HasSubstr("selfcheck: all 31 collectives correct on 2 ranks"));
}

TEST(LaunchCommand, UnknownFlagsAndBadValuesAreErrorsNamingTheFlag) {
  auto [code, output] = run_shell(kFsdpp + " selfcheck --no-such-flag");
  EXPECT_NE(code, 0);
  EXPECT_THAT(output, HasSubstr("--no-such-flag"));
  auto [code2, output2] = run_shell(kFsdpp + " selfcheck --nproc 0");
  EXPECT_NE(code2, 0);
  EXPECT_THAT(output2, HasSubstr("--nproc"));
  auto [code3, output3] = run_shell(kFsdpp);
  EXPECT_NE(code3, 0);
  EXPECT_THAT(output3, HasSubstr("subcommand"));
}

TEST(LaunchCommand, ABadEnvironmentIsOneClearLineAndAFailure) {
  auto [code, output] = run_shell("RANK=abc WORLD_SIZE=2 " + kFsdpp + " selfcheck");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(output, HasSubstr("fsdpp: error: environment variable RANK='abc'"));
}

TEST(LaunchCommand, SelfcheckWritesVersionedJson) {
  auto path = std::filesystem::temp_directory_path() / ("fsdpp-selfcheck-" + std::to_string(::getpid()) + ".json");
  auto [code, output] = run_shell(kFsdpp + " selfcheck --nproc 2 --numel 100 --iterations 1 --json " + path.string());
  ASSERT_EQ(code, 0) << output;
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("\"format\": \"fsdpp.selfcheck\""));
  EXPECT_THAT(text, HasSubstr("\"version\": 1"));
  EXPECT_THAT(text, HasSubstr("\"all_correct\": true"));
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace fsdpp
