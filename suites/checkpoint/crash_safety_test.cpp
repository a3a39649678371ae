// A save killed (SIGKILL) at any point leaves the previous checkpoint complete and found,
// and the torn one reported with its reason; the next save clears the debris. The same
// for an asynchronous save (async_saver.h) killed in its background thread.
#include <gtest/gtest.h>
#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>

#include <set>

#include "core/checkpoint/async_saver.h"
#include "core/checkpoint/checkpoint_reader.h"
#include "core/checkpoint/checkpoint_scan.h"
#include "core/checkpoint/checkpoint_writer.h"
#include "harness/testing/multirank.h"
#include "harness/testing/temp_dir.h"
#include "suites/checkpoint/checkpoint_fixtures.h"

namespace fsdpp::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::bitwise_equal;
using testing::folder_names;

std::vector<std::pair<std::string, at::Tensor>> crash_tensors_at(int64_t step) {
  return {{"model/w", torch::arange(24, at::kFloat).reshape({6, 4}) + step}, {"model/b", torch::full({5}, step * 1.0)}};
}

struct Crash {
  SavePoint point;
  int victim;               // the rank that dies there
  std::string torn_reason;  // "" when the new checkpoint was already committed
  bool async = false;       // saved by AsyncCheckpointSaver (killed in its thread)
};

void PrintTo(const Crash& c, std::ostream* os) {
  *os << "point " << static_cast<int>(c.point) << ", rank " << c.victim << (c.async ? ", async" : "");
}

class KilledDuringSave : public ::testing::TestWithParam<Crash> {};

TEST_P(KilledDuringSave, ThePreviousCheckpointStaysCompleteAndTheTornOneIsReported) {
  const Crash crash = GetParam();
  harness::TempDir tmp("ckpt-crash");
  const fs::path checkpoints = tmp / "checkpoints";
  const fs::path reached = tmp / "victim-reached-the-point";
  harness::RunOptions run;
  run.launch.echo_output = false;
  run.launch.kill_grace = std::chrono::milliseconds(200);
  auto report = harness::run_ranks_with_gtest(
      2,
      [&](harness::RankContext& ctx) {
        save_checkpoint(ctx.comm, checkpoints / step_dir_name(100),
                        testing::split_like_fsdp(crash_tensors_at(100), 2)[ctx.rank], {{"step", 100}});
        SaveOptions options;
        options.keep_last = 1;
        options.on_point = [&](SavePoint p) {
          if (p != crash.point || ctx.rank != crash.victim) return;
          testing::write_text(reached, "");
          ::kill(::getpid(), SIGKILL);
        };
        const auto content = testing::split_like_fsdp(crash_tensors_at(200), 2)[ctx.rank];
        if (crash.async) {
          AsyncCheckpointSaver saver(ctx.comm);
          saver.save(checkpoints / step_dir_name(200), content, {{"step", 200}}, options);
          saver.wait();
        } else {
          save_checkpoint(ctx.comm, checkpoints / step_dir_name(200), content, {{"step", 200}}, options);
        }
      },
      run);
  // The victim died of its own SIGKILL at the point (the launcher may see its peer's
  // failure first and report the victim as stopped by it: either way, signal 9).
  ASSERT_TRUE(fs::exists(reached)) << report.summary();
  EXPECT_EQ(report.ranks[crash.victim].signal, SIGKILL) << report.summary();

  auto latest = find_latest_complete(checkpoints);
  if (crash.point == SavePoint::Pruning) {
    // Committed; killed while removing the older checkpoint (keep_last 1). That one was
    // renamed out of the step-N names first: no half-removed step-000100 is left (one was,
    // found by ci/fault_trials.sh), only a torn-save folder that the next save removes.
    EXPECT_EQ(latest.dir, checkpoints / step_dir_name(200));
    EXPECT_TRUE(latest.skipped.empty());
    const auto names = folder_names(checkpoints);
    EXPECT_EQ(names.count(step_dir_name(100)), 0u);
    ASSERT_EQ(names.size(), 2u);
    EXPECT_EQ(names.begin()->rfind("step-000100.tmp-", 0), 0u) << *names.begin();
    load_checkpoint(checkpoints / step_dir_name(200)).verify_all();
  } else if (crash.torn_reason.empty()) {  // committed, killed before pruning: both complete
    EXPECT_EQ(latest.dir, checkpoints / step_dir_name(200));
    EXPECT_TRUE(latest.skipped.empty());
  } else {
    EXPECT_EQ(latest.dir, checkpoints / step_dir_name(100));
    EXPECT_EQ(latest.step, 100);
    ASSERT_EQ(latest.skipped.size(), 1u);
    const std::string torn = latest.skipped[0].path.filename().string();
    EXPECT_EQ(torn.rfind("step-000200.tmp-", 0), 0u) << torn;
    EXPECT_EQ(latest.skipped[0].reason, crash.torn_reason);
    EXPECT_EQ(latest.skipped[0].describe(), "skipping " + torn + ": " + crash.torn_reason);
  }
  if (crash.point != SavePoint::Pruning) {
    auto previous = load_checkpoint(checkpoints / step_dir_name(100));
    previous.verify_all();
    for (const auto& [name, full] : crash_tensors_at(100))
      EXPECT_TRUE(bitwise_equal(previous.read(name), full)) << name;
  }

  // The next save commits, then removes the older checkpoints and the torn save.
  SaveOptions keep_one;
  keep_one.keep_last = 1;
  write_checkpoint(checkpoints / step_dir_name(300), testing::split_like_fsdp(crash_tensors_at(300), 3), {}, keep_one);
  EXPECT_EQ(folder_names(checkpoints), std::set<std::string>{step_dir_name(300)});
}

const std::string kNoIndex = "index.json missing (torn save)";
const std::string kNotRenamed = "index.json written but the folder was never renamed (torn save)";

std::string crash_name(const ::testing::TestParamInfo<Crash>& info) {
  static const std::vector<std::string> names = {"BeforeARankFile", "AfterARankFile", "AfterAllRankFiles",
                                                 "AfterTheIndex",   "AfterTheRename", "WhilePruning"};
  return names[static_cast<int>(info.param.point)] + "_rank" + std::to_string(info.param.victim) +
         (info.param.async ? "_async" : "");
}

std::vector<Crash> crashes() {
  std::vector<Crash> out;
  for (bool async : {false, true}) {
    out.push_back({SavePoint::Started, 1, kNoIndex, async});
    out.push_back({SavePoint::RankFileWritten, 0, kNoIndex, async});
    out.push_back({SavePoint::RankFileWritten, 1, kNoIndex, async});
    out.push_back({SavePoint::AllFilesWritten, 0, kNoIndex, async});
    out.push_back({SavePoint::IndexWritten, 0, kNotRenamed, async});
    out.push_back({SavePoint::Committed, 0, "", async});
    out.push_back({SavePoint::Pruning, 0, "", async});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(AtEachPoint, KilledDuringSave, ::testing::ValuesIn(crashes()), crash_name);

}  // namespace
}  // namespace fsdpp::checkpoint
