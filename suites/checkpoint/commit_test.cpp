// The checkpoints folder: commit, keep_last, finding the newest complete checkpoint, and
// what the index records.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "core/checkpoint/checkpoint_reader.h"
#include "core/checkpoint/checkpoint_scan.h"
#include "core/checkpoint/checkpoint_writer.h"
#include "core/checkpoint/sha256.h"
#include "harness/testing/temp_dir.h"
#include "suites/checkpoint/checkpoint_fixtures.h"

namespace fsdpp::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::bitwise_equal;
using testing::folder_names;

std::vector<std::pair<std::string, at::Tensor>> tensors_at(int64_t step) {
  return {{"model/w", torch::arange(12, at::kFloat).reshape({4, 3}) * step},
          {"model/scale", torch::tensor(0.5 * static_cast<double>(step))}};
}

fs::path save_step(const fs::path& checkpoints, int64_t step, int keep_last = 0) {
  SaveOptions options;
  options.keep_last = keep_last;
  return write_checkpoint(checkpoints / step_dir_name(step), testing::split_like_fsdp(tensors_at(step), 2),
                          {{"step", step}}, options)
      .dir;
}

TEST(Commit, TheIndexRecordsFormatMeshFilesRowsAndTheCallersState) {
  harness::TempDir tmp("ckpt-index");
  nlohmann::json state = {{"step", 7}, {"data", {{"epoch", 1}, {"offset", 4096}}}, {"rng", "c2VlZA=="}};
  auto ranks = testing::split_like_fsdp(tensors_at(7), 3);
  for (auto& r : ranks) r.mesh = {"hybrid_shard", 3, 2};
  write_checkpoint(tmp / "step-000007", ranks, state);
  auto index = load_checkpoint(tmp / "step-000007").index();
  EXPECT_EQ(index.world_size, 3);
  EXPECT_EQ(index.mesh.strategy, "hybrid_shard");
  EXPECT_EQ(index.mesh.shard_group_size, 3);
  EXPECT_EQ(index.mesh.replicas, 2);
  EXPECT_EQ(index.train_state, state);
  // w [4, 3] on 3 ranks: rows [0, 2), [2, 4), none; the 0-d scale lives with rank 0.
  const auto& w = index.tensors.at("model/w");
  ASSERT_EQ(w.pieces.size(), 2u);
  EXPECT_EQ(w.pieces[1].file, "rank-00001.safetensors");
  EXPECT_EQ(w.pieces[1].begin, 2);
  EXPECT_EQ(w.pieces[1].end, 4);
  EXPECT_EQ(index.tensors.at("model/scale").shape, std::vector<int64_t>{});
  EXPECT_EQ(index.files.size(), 2u);  // rank 2 holds no rows, so it writes no file
  auto digest = sha256_of_file(tmp / "step-000007" / "rank-00000.safetensors");
  EXPECT_EQ(index.files.at("rank-00000.safetensors").sha256, digest.sha256);
  EXPECT_EQ(index.files.at("rank-00000.safetensors").bytes, digest.bytes);
  auto raw = nlohmann::json::parse(testing::read_text(tmp / "step-000007" / "index.json"));
  EXPECT_EQ(raw["format"], "fsdpp.checkpoint");
  EXPECT_EQ(raw["version"], 2);
  EXPECT_EQ(raw["checksum"], "sha256");
  const std::string index_sha256 = raw["index_sha256"];  // the index's own content (CHECKPOINT.md)
  raw.erase("index_sha256");
  EXPECT_EQ(index_sha256, sha256_hex(raw.dump()));
}

TEST(Commit, KeepLastRemovesOlderCompleteCheckpointsAndNeverTheNewest) {
  harness::TempDir tmp("ckpt-keep");
  for (int64_t step = 1; step <= 3; ++step) save_step(tmp.path(), step, /*keep_last=*/2);
  EXPECT_EQ(folder_names(tmp.path()), (std::set<std::string>{"step-000002", "step-000003"}));
  save_step(tmp.path(), 4, /*keep_last=*/1);
  EXPECT_EQ(folder_names(tmp.path()), (std::set<std::string>{"step-000004"}));
  save_step(tmp.path(), 5, /*keep_last=*/0);  // 0 keeps everything
  EXPECT_EQ(folder_names(tmp.path()), (std::set<std::string>{"step-000004", "step-000005"}));
}

// What keep_last removed comes back in the save's result: the retired checkpoints and a torn
// save's leftover folder (at a step no newer than the one kept), and no warning.
TEST(Commit, KeepLastReportsEachFolderItRemovedAndNoWarning) {
  harness::TempDir tmp("ckpt-keep-report");
  save_step(tmp.path(), 1);
  save_step(tmp.path(), 2);
  const fs::path torn = tmp / "step-000002.tmp-torn";
  fs::create_directories(torn);
  testing::write_text(torn / "rank-00000.safetensors", "half a file");
  SaveOptions options;
  options.keep_last = 1;
  const auto saved =
      write_checkpoint(tmp / step_dir_name(3), testing::split_like_fsdp(tensors_at(3), 2), {{"step", 3}}, options);
  EXPECT_TRUE(saved.warnings.empty()) << saved.warnings.front();
  std::set<std::string> removed;
  for (const auto& path : saved.removed) removed.insert(path.filename().string());
  EXPECT_EQ(removed, (std::set<std::string>{"step-000001", "step-000002", "step-000002.tmp-torn"}));
  EXPECT_EQ(folder_names(tmp.path()), (std::set<std::string>{"step-000003"}));
}

// Sets or clears a file's immutable flag (FS_IMMUTABLE_FL, what `chattr +i` sets), which
// makes even root's removal fail. False where the filesystem or the user cannot.
bool set_immutable(const fs::path& path, bool on) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return false;
  int flags = 0;
  bool ok = ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0;
  if (ok) {
    flags = on ? (flags | FS_IMMUTABLE_FL) : (flags & ~FS_IMMUTABLE_FL);
    ok = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  }
  ::close(fd);
  return ok;
}

// An older checkpoint keep_last cannot remove is a warning of the save, naming it; the new
// checkpoint stands and nothing is reported removed.
TEST(Commit, AnOldCheckpointThatCannotBeRemovedIsAWarningOfTheSaveAndTheNewOneStands) {
  harness::TempDir tmp("ckpt-keep-stuck");
  save_step(tmp.path(), 1);
  const fs::path stuck = tmp / "step-000001" / "rank-00000.safetensors";
  if (!set_immutable(stuck, true))
    GTEST_SKIP() << "cannot set the immutable flag here (FS_IOC_SETFLAGS needs root and ext2/3/4, xfs or btrfs): "
                 << std::strerror(errno);
  SaveOptions options;
  options.keep_last = 1;
  const auto saved =
      write_checkpoint(tmp / step_dir_name(2), testing::split_like_fsdp(tensors_at(2), 2), {{"step", 2}}, options);
  // The flag off again wherever the file went (the prune renames the folder before removing it).
  for (const auto& entry : fs::recursive_directory_iterator(tmp.path()))
    if (entry.path().filename() == "rank-00000.safetensors") set_immutable(entry.path(), false);
  ASSERT_EQ(saved.warnings.size(), 1u);
  EXPECT_EQ(saved.warnings[0].rfind("could not remove old checkpoint " + (tmp / "step-000001").string(), 0), 0u)
      << saved.warnings[0];
  EXPECT_TRUE(saved.removed.empty());
  EXPECT_TRUE(load_checkpoint(tmp / "step-000002").index().train_state == nlohmann::json({{"step", 2}}));
}

TEST(Commit, IncompleteFoldersAreNeitherCountedNorRemovedByKeepLast) {
  harness::TempDir tmp("ckpt-keep-incomplete");
  save_step(tmp.path(), 1);
  save_step(tmp.path(), 2);
  fs::remove(tmp / "step-000002" / "index.json");  // no longer complete
  save_step(tmp.path(), 3, /*keep_last=*/2);
  EXPECT_EQ(folder_names(tmp.path()), (std::set<std::string>{"step-000001", "step-000002", "step-000003"}));
}

TEST(Commit, SavingTheSameStepAgainReplacesIt) {
  harness::TempDir tmp("ckpt-again");
  save_step(tmp.path(), 5);
  write_checkpoint(tmp / "step-000005", testing::split_like_fsdp(tensors_at(9), 3), {{"step", 9}});
  auto reader = load_checkpoint(tmp / "step-000005");
  EXPECT_EQ(reader.index().world_size, 3);
  EXPECT_TRUE(bitwise_equal(reader.read("model/w"), tensors_at(9)[0].second));
  EXPECT_EQ(folder_names(tmp.path()), std::set<std::string>{"step-000005"});
}

TEST(FindLatest, SkipsACorruptNewerCheckpointAndSaysWhichFileAndWhy) {
  harness::TempDir tmp("ckpt-latest");
  save_step(tmp.path(), 10);
  save_step(tmp.path(), 20);
  const fs::path file = tmp / "step-000020" / "rank-00001.safetensors";
  std::string bytes = testing::read_text(file);
  bytes.back() ^= 0x01;
  testing::write_text(file, bytes);
  auto latest = find_latest_complete(tmp.path());
  EXPECT_EQ(latest.dir, tmp / "step-000010");
  ASSERT_EQ(latest.skipped.size(), 1u);
  EXPECT_EQ(latest.skipped[0].path, tmp / "step-000020");
  EXPECT_EQ(latest.skipped[0].reason,
            "checkpoint file " + file.string() + ": sha256 is " + sha256_hex(bytes) + ", index.json says " +
                load_checkpoint(tmp / "step-000020").index().files.at(file.filename().string()).sha256 +
                " (file corrupt)");
  // Sizes alone cannot see a flipped byte.
  EXPECT_EQ(find_latest_complete(tmp.path(), /*verify_checksums=*/false).dir, tmp / "step-000020");
}

TEST(FindLatest, FindsNothingInAMissingOrEmptyFolder) {
  harness::TempDir tmp("ckpt-none");
  EXPECT_FALSE(find_latest_complete(tmp / "absent").dir.has_value());
  EXPECT_FALSE(find_latest_complete(tmp.path()).dir.has_value());
  EXPECT_EQ(step_dir_name(120), "step-000120");
  EXPECT_EQ(parse_step_dir_name("step-1234567"), 1234567);
  EXPECT_FALSE(parse_step_dir_name("step-000120.tmp-ab").has_value());
}

}  // namespace
}  // namespace fsdpp::checkpoint
