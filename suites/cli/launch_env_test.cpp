// The fsdpp binary itself: started by hand under torchrun-style and SLURM-style
// environments it forms the same world; --nproc launches ranks itself; bad flags fail.
#include <ATen/ATen.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sched.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>

#include "core/data/token_file.h"
#include "core/runtime/host_memory.h"
#include "core/runtime/threads.h"
#include "harness/launch/launcher.h"
#include "harness/testing/temp_dir.h"
#include "harness/testing/token_streams.h"
#include "suites/cli/fsdpp_binary.h"

namespace fsdpp {
namespace {

using ::testing::HasSubstr;

// Runs one fsdpp process per rank with the given environment and returns the report.
harness::LaunchReport run_fsdpp(int n, const std::vector<std::string>& args,
                                const std::function<std::vector<std::pair<std::string, std::string>>(int)>& env,
                                harness::LaunchOptions options = {}) {
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
        {"RANK", std::to_string(rank)},       {"WORLD_SIZE", std::to_string(n)},
        {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", std::to_string(n)},
        {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", std::to_string(port)}};
  });
  ASSERT_TRUE(torchrun.ok()) << torchrun.summary();
  int port2 = harness::reserve_free_port();
  auto slurm = run_fsdpp(n, kQuickSelfcheck, [&](int rank) {
    return std::vector<std::pair<std::string, std::string>>{
        {"SLURM_PROCID", std::to_string(rank)},  {"SLURM_NTASKS", std::to_string(n)},
        {"SLURM_LOCALID", std::to_string(rank)}, {"SLURM_TASKS_PER_NODE", std::to_string(n)},
        {"SLURM_JOB_NODELIST", "127.0.0.1"},     {"MASTER_PORT", std::to_string(port2)}};
  });
  ASSERT_TRUE(slurm.ok()) << slurm.summary();
  // Each run on its own port (read from MASTER_PORT in both); the same world otherwise.
  const std::string torchrun_master = " master=127.0.0.1:" + std::to_string(port),
                    slurm_master = " master=127.0.0.1:" + std::to_string(port2);
  auto without_master = [](std::string line, const std::string& master) {
    const auto at = line.find(master);
    return at == std::string::npos ? line : line.erase(at, master.size());
  };
  for (int r = 0; r < n; ++r) {
    EXPECT_THAT(torchrun.ranks[r].output_tail,
                ::testing::Contains(HasSubstr("world: rank=" + std::to_string(r) + " world_size=3 local_rank=" +
                                              std::to_string(r) + " local_world_size=3")));
    EXPECT_THAT(slurm.ranks[r].output_tail,
                ::testing::Contains(HasSubstr("world: rank=" + std::to_string(r) + " world_size=3 local_rank=" +
                                              std::to_string(r) + " local_world_size=3")));
    EXPECT_TRUE(printed(torchrun.ranks[r], "source=torchrun"));
    EXPECT_TRUE(printed(slurm.ranks[r], "source=slurm"));
    EXPECT_THAT(world_line(torchrun.ranks[r]), HasSubstr(torchrun_master)) << "rank " << r;
    EXPECT_THAT(world_line(slurm.ranks[r]), HasSubstr(slurm_master)) << "rank " << r;
    EXPECT_EQ(without_master(world_line(torchrun.ranks[r]), torchrun_master),
              without_master(world_line(slurm.ranks[r]), slurm_master))
        << "rank " << r;
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

// --- --bind-cores ---------------------------------------------------------------------

TEST(CoreBinding, RanksGetConsecutiveSlicesOfTheCpusAndShareThemOnlyWhenTheyRunOut) {
  EXPECT_EQ(harness::rank_cpus({0, 1, 2, 3}, 0, 2), (std::vector<int>{0, 1}));
  EXPECT_EQ(harness::rank_cpus({0, 1, 2, 3}, 1, 2), (std::vector<int>{2, 3}));
  EXPECT_EQ(harness::rank_cpus({4, 6}, 1, 1), (std::vector<int>{6}));        // the allowed CPUs, not 0..n
  EXPECT_EQ(harness::rank_cpus({0, 1}, 2, 1), (std::vector<int>{0}));        // a third rank on 2 CPUs wraps
  EXPECT_EQ(harness::rank_cpus({0, 1, 2}, 1, 2), (std::vector<int>{0, 2}));  // wraps mid-slice
  EXPECT_EQ(harness::rank_cpus({0, 1}, 0, 4), (std::vector<int>{0, 1}));     // more threads than CPUs: all
  EXPECT_THROW(harness::rank_cpus({}, 0, 1), std::invalid_argument);
  EXPECT_THROW(harness::rank_cpus({0}, 0, 0), std::invalid_argument);
  EXPECT_EQ(runtime::cpu_list_text({0, 1, 2, 3, 6, 8, 9}), "0-3,6,8-9");
  EXPECT_EQ(runtime::cpu_list_text({5}), "5");
}

// A child that checks its own CPU mask, pinned to `cpus`.
harness::LaunchReport launch_pinned(const std::vector<int>& cpus) {
  harness::LaunchOptions options;
  options.budget = std::chrono::seconds(30);
  options.echo_output = false;
  return harness::launch(
      1,
      [&](int) {
        harness::ProcessSpec spec;
        spec.cpus = cpus;
        spec.child_main = [cpus](int status_fd) {
          const auto mask = runtime::affinity_cpus();
          const bool pinned = mask == cpus;
          harness::report_status(status_fd, pinned ? harness::Verdict::Ok : harness::Verdict::Failed,
                                 "runs on CPUs " + runtime::cpu_list_text(mask));
          return pinned ? 0 : 1;
        };
        return spec;
      },
      options);
}

TEST(CoreBinding, ALaunchedRankRunsOnlyOnItsCpusAndOneItCannotUseFailsTheRankNamingThem) {
  const auto allowed = runtime::affinity_cpus();
  ASSERT_FALSE(allowed.empty());
  auto pinned = launch_pinned({allowed.back()});
  EXPECT_TRUE(pinned.ok()) << pinned.summary();

  auto impossible = launch_pinned({CPU_SETSIZE - 1});  // no such CPU online
  ASSERT_FALSE(impossible.ok());
  EXPECT_EQ(impossible.ranks[0].status, harness::RankStatus::Failed);
  EXPECT_THAT(impossible.ranks[0].message, HasSubstr("cannot pin rank 0 to CPUs " + std::to_string(CPU_SETSIZE - 1)));
}

// The "world: ..." line rank `rank` printed through the launcher, or "<none>".
std::string rank_world_line(const std::string& output, int rank) {
  const std::string prefix = "[rank " + std::to_string(rank) + "] world: ";
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind(prefix, 0) == 0) return line;
  return "<none>";
}

TEST(CoreBinding, NprocWithBindCoresGivesEveryRankItsOwnSliceAndWithoutItNone) {
  const auto allowed = runtime::affinity_cpus();
  ASSERT_FALSE(allowed.empty());
  auto [code, output] =
      run_shell(kFsdpp + " selfcheck --nproc 2 --threads 1 --bind-cores --numel 101 --iterations 1 2>&1");
  ASSERT_EQ(code, 0) << output;
  for (int rank : {0, 1}) {
    const std::string cpus = runtime::cpu_list_text(harness::rank_cpus(allowed, rank, 1));
    EXPECT_THAT(rank_world_line(output, rank), ::testing::EndsWith(" threads=1 cpus=" + cpus));
  }
  // A rank counts its own slice, not every local rank's threads against it.
  if (allowed.size() >= 2) {
    EXPECT_THAT(output, ::testing::Not(HasSubstr("exceed the"))) << output;
  }
  auto [free_code, free_output] = run_shell(kFsdpp + " selfcheck --nproc 2 --numel 101 --iterations 1 2>&1");
  ASSERT_EQ(free_code, 0) << free_output;
  EXPECT_THAT(rank_world_line(free_output, 0), ::testing::Not(HasSubstr("cpus=")));
}

// --nproc on a machine without an NVIDIA device: the ranks are the launcher forked (no
// second LibTorch start-up), which trains the same bits as ranks exec'd afresh
// (FSDPP_LAUNCH_EXEC=1, the path of a GPU machine); --bind-cores always execs (OpenMP
// reads its binding when LibTorch loads).
TEST(LaunchCommand, ForkedRanksTrainTheBitsOfExecdRanks) {
  if (std::filesystem::exists("/dev/nvidiactl")) GTEST_SKIP() << "this machine has an NVIDIA device: ranks are exec'd";
  harness::TempDir dir;
  const auto data = harness::write_markov_tokens(dir.path(), 2000, 32).string();
  const std::string flags =
      " train --nproc 2 --deterministic --from-scratch --model-type llama --model-size tiny "
      "--vocab-size 32 --seq-len 16 --batch-size 2 --max-steps 3 --data " +
      data + " --save-dir " + dir.path().string() + " --experiment-name ";
  auto [fork_code, fork_output] = run_shell(kFsdpp + flags + "forked 2>&1");
  ASSERT_EQ(fork_code, 0) << fork_output;
  auto [exec_code, exec_output] = run_shell("FSDPP_LAUNCH_EXEC=1 " + kFsdpp + flags + "execd 2>&1");
  ASSERT_EQ(exec_code, 0) << exec_output;
  for (int rank : {0, 1}) {
    EXPECT_THAT(rank_world_line(fork_output, rank), ::testing::EndsWith(" launch=fork"));
    EXPECT_THAT(rank_world_line(exec_output, rank), ::testing::Not(HasSubstr("launch=")));
  }
  auto read = [](const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const auto forked = read(dir.path() / "forked" / "hf" / "model.safetensors");
  EXPECT_FALSE(forked.empty());
  EXPECT_EQ(forked, read(dir.path() / "execd" / "hf" / "model.safetensors"));
  auto [bound_code, bound_output] =
      run_shell(kFsdpp + " selfcheck --nproc 2 --threads 1 --bind-cores --numel 101 --iterations 1 2>&1");
  ASSERT_EQ(bound_code, 0) << bound_output;
  EXPECT_THAT(rank_world_line(bound_output, 0), ::testing::Not(HasSubstr("launch=")));
}

// Bad usage is exit 2 and one line, whatever CLI11's own code for the error (it used to
// leak out: 105 for a value outside a set, 106 for a missing subcommand, 109 for an
// unknown flag).
TEST(LaunchCommand, UnknownFlagsAndBadValuesAreErrorsNamingTheFlag) {
  auto [code, output] = run_shell(kFsdpp + " selfcheck --no-such-flag 2>&1");
  EXPECT_EQ(code, 2);
  EXPECT_THAT(output, HasSubstr("--no-such-flag"));
  auto [code2, output2] = run_shell(kFsdpp + " selfcheck --nproc 0 2>&1");
  EXPECT_EQ(code2, 2);
  EXPECT_THAT(output2, HasSubstr("--nproc"));
  auto [code3, output3] = run_shell(kFsdpp + " 2>&1");
  EXPECT_EQ(code3, 2);
  EXPECT_THAT(output3, HasSubstr("subcommand"));
  auto [code4, output4] = run_shell(kFsdpp + " bench --preset nope 2>&1");
  EXPECT_EQ(code4, 2);
  EXPECT_THAT(output4, ::testing::StartsWith("fsdpp: error: "));
  EXPECT_THAT(output4, HasSubstr("--preset"));
  EXPECT_EQ(std::count(output4.begin(), output4.end(), '\n'), 1) << output4;
}

TEST(LaunchCommand, ABadEnvironmentIsOneClearLineAndAFailure) {
  auto [code, output] = run_shell("RANK=abc WORLD_SIZE=2 " + kFsdpp + " selfcheck");
  EXPECT_EQ(code, 1);
  EXPECT_THAT(output, HasSubstr("fsdpp: error: environment variable RANK='abc'"));
  EXPECT_EQ(std::count(output.begin(), output.end(), '\n'), 1) << output;
}

// A rank that fails at run time exits 1 with its one line, and every peer exits 1 with one
// line naming it, however the world was launched. Rank 0 cannot create its run directory
// (--save-dir is a file) while rank 1 is already in the first collectives of training.
TEST(LaunchCommand, WhenRankZeroFailsItsPeerNamesItInEveryLaunchMode) {
  harness::TempDir dir;
  const auto tokens = dir.path() / "tokens.bin";
  data::write_llmc_tokens(tokens, at::randint(0, 32, {2000}, at::kLong));
  std::ofstream(dir.path() / "not_a_dir") << "a file where --save-dir needs a folder\n";
  const std::vector<std::string> args = {"train",
                                         "--from-scratch",
                                         "--model-size",
                                         "tiny",
                                         "--vocab-size",
                                         "32",
                                         "--seq-len",
                                         "16",
                                         "--max-steps",
                                         "2",
                                         "--timeout-s",
                                         "60",
                                         "--data",
                                         tokens.string(),
                                         "--save-dir",
                                         (dir.path() / "not_a_dir").string(),
                                         "--experiment-name",
                                         "x"};
  const std::string rank0_said = "not_a_dir";
  // Each peer's own error line (its last stderr line with "fsdpp: error:").
  auto error_line = [](const harness::RankResult& r) {
    std::string line;
    for (const auto& l : r.output_tail)
      if (l.find("fsdpp: error: ") != std::string::npos) line = l;
    return line;
  };
  auto expect_named = [&](const harness::LaunchReport& report, const std::string& mode) {
    ASSERT_EQ(report.ranks.size(), 2u) << mode;
    EXPECT_EQ(report.ranks[0].status, harness::RankStatus::Failed) << mode << "\n" << report.summary();
    EXPECT_EQ(report.ranks[0].exit_code, 1) << mode;
    EXPECT_THAT(error_line(report.ranks[0]), HasSubstr(rank0_said)) << mode;
    EXPECT_EQ(report.ranks[1].status, harness::RankStatus::Failed) << mode << "\n" << report.summary();
    EXPECT_EQ(report.ranks[1].exit_code, 1) << mode;
    EXPECT_THAT(error_line(report.ranks[1]), HasSubstr("rank 0 failed: ")) << mode << "\n" << report.summary();
    EXPECT_THAT(error_line(report.ranks[1]), HasSubstr(rank0_said)) << mode;
    EXPECT_LT(report.ranks[1].ended_after_s, 45.0) << mode << ": well before the 60 s collective timeout";
  };
  harness::LaunchOptions observe;  // no teardown by the test's launcher: each rank ends on its own
  observe.kill_all_on_failure = false;
  observe.echo_output = false;
  int port = harness::reserve_free_port();
  expect_named(run_fsdpp(
                   2, args,
                   [&](int rank) {
                     return std::vector<std::pair<std::string, std::string>>{
                         {"RANK", std::to_string(rank)},       {"WORLD_SIZE", "2"},
                         {"LOCAL_RANK", std::to_string(rank)}, {"LOCAL_WORLD_SIZE", "2"},
                         {"MASTER_ADDR", "127.0.0.1"},         {"MASTER_PORT", std::to_string(port)}};
                   },
                   observe),
               "torchrun variables");
  port = harness::reserve_free_port();
  expect_named(run_fsdpp(
                   2, args,
                   [&](int rank) {
                     return std::vector<std::pair<std::string, std::string>>{
                         {"SLURM_PROCID", std::to_string(rank)},  {"SLURM_NTASKS", "2"},
                         {"SLURM_LOCALID", std::to_string(rank)}, {"SLURM_NTASKS_PER_NODE", "2"},
                         {"SLURM_JOB_NODELIST", "localhost"},     {"MASTER_PORT", std::to_string(port)}};
                   },
                   observe),
               "SLURM variables");
  // --nproc: fsdpp's own launcher lets the peer end on its own before stopping it.
  std::string command = kFsdpp + " train --nproc 2";
  for (size_t i = 1; i < args.size(); ++i) command += " '" + args[i] + "'";
  auto [code, output] = run_shell(command + " 2>&1");
  EXPECT_EQ(code, 1) << output;
  EXPECT_THAT(output, ::testing::ContainsRegex("\\[rank 1\\] fsdpp: error: [^\n]*rank 0 failed: [^\n]*not_a_dir"))
      << output;
  EXPECT_THAT(output, HasSubstr("rank 0 failed (exit 1)")) << output;
}

TEST(LaunchCommand, SelfcheckWritesVersionedJson) {
  auto path = std::filesystem::temp_directory_path() / ("fsdpp-selfcheck-" + std::to_string(::getpid()) + ".json");
  auto [code, output] = run_shell(kFsdpp + " selfcheck --nproc 2 --numel 100 --iterations 1 --json " + path.string());
  ASSERT_EQ(code, 0) << output;
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(path);
  // JSON (the whole file parses), versioned, and the run's verdict.
  const auto doc = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(doc.is_object()) << text;
  EXPECT_EQ(doc["format"], "fsdpp.selfcheck");
  EXPECT_EQ(doc["version"], 1);
  EXPECT_EQ(doc["all_correct"], true);
}

// Minor page faults of allocating, touching and freeing one 64 MiB block (16384 pages).
long faults_of_one_large_block() {
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  const size_t bytes = size_t{64} << 20;
  char* block = static_cast<char*>(std::malloc(bytes));
  std::memset(block, 1, bytes);
  asm volatile("" : : "g"(block) : "memory");  // the block escapes: nothing above is elided
  std::free(block);
  ::getrusage(RUSAGE_SELF, &after);
  return after.ru_minflt - before.ru_minflt;
}

// The heap policy every rank applies (runtime/host_memory.h), in a child process since it
// is process-wide: with glibc's defaults a freed 64 MiB block is unmapped, so allocating it
// again page-faults every page in again; once freed blocks are kept, it does not.
// A rebuild during a long `fsdpp bench` replaces the binary the cells are launched from:
// the launcher then runs its own image through /proc/<pid>/exe, which outlives the file.
TEST(SelfExecutable, AReplacedExecutableStillRunsThroughProcPidExe) {
  EXPECT_EQ(harness::runnable_executable("/opt/fsdpp", 42), "/opt/fsdpp");
  EXPECT_EQ(harness::runnable_executable("/opt/fsdpp (deleted)", 42), "/proc/42/exe");

  harness::TempDir dir("self-exe");
  const auto copy = dir / "sleep-copy";
  std::filesystem::copy_file("/bin/sleep", copy);
  std::filesystem::permissions(copy, std::filesystem::perms::owner_all);
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::execl(copy.c_str(), "sleep-copy", "30", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  // Wait until the child runs the copy, then remove the file under it.
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  std::string target;
  for (int i = 0; i < 500 && target.find("sleep-copy") == std::string::npos; ++i) {
    std::error_code ec;
    target = std::filesystem::read_symlink(link, ec).string();
    if (target.find("sleep-copy") == std::string::npos) ::usleep(10000);
  }
  ASSERT_THAT(target, HasSubstr("sleep-copy"));
  std::filesystem::remove(copy);
  target = std::filesystem::read_symlink(link).string();
  EXPECT_THAT(target, ::testing::EndsWith(" (deleted)"));
  const std::string runnable = harness::runnable_executable(target, pid);
  EXPECT_EQ(runnable, link);
  EXPECT_EQ(std::system((runnable + " 0").c_str()), 0) << runnable;  // sleep 0, from the removed file
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
}

TEST(HostMemory, AKeptLargeBlockIsReusedWithoutPageFaultingItInAgain) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    faults_of_one_large_block();
    const long by_default = faults_of_one_large_block();
    if (!runtime::keep_freed_host_memory()) ::_exit(3);
    faults_of_one_large_block();  // the heap grows to hold it once
    const long kept = faults_of_one_large_block();
    ::_exit(by_default < 8192 ? 4 : kept > 512 ? 5 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "3: glibc refused the thresholds; 4: by default the block did not fault "
                                       "(glibc kept it anyway); 5: a kept block still faulted";
}

}  // namespace
}  // namespace fsdpp
