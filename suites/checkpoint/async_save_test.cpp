// Asynchronous saves (core/checkpoint/async_saver.h): the files of a synchronous save,
// written by a background thread while the caller's own collectives go on, from a copy
// taken before save() returned; a failure comes back on every rank, once, and the saver
// then saves again.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/checkpoint/async_saver.h"
#include "core/checkpoint/checkpoint_reader.h"
#include "core/checkpoint/checkpoint_scan.h"
#include "harness/testing/multirank.h"
#include "harness/testing/temp_dir.h"
#include "suites/checkpoint/checkpoint_fixtures.h"

namespace fsdpp::checkpoint {
namespace {

namespace fs = std::filesystem;
using testing::bitwise_equal;
using testing::error_of;
using testing::folder_names;
using ::testing::HasSubstr;
using testing::read_text;

std::vector<std::pair<std::string, at::Tensor>> model_tensors() {
  return {{"model/w", torch::randn({7, 5}, torch::TensorOptions().dtype(at::kFloat))},
          {"model/h", torch::randn({3, 4}).to(at::kBFloat16)},
          {"optim/w/exp_avg", torch::rand({7, 5}, at::kDouble)},
          {"meta/steps", torch::arange(9, at::kLong)}};
}

// Holds the background thread at one save point until release() (every rank's own).
class Gate {
 public:
  explicit Gate(SavePoint point) : point_(point) {}
  std::function<void(SavePoint)> hook() {
    return [this](SavePoint p) {
      if (p != point_) return;
      std::unique_lock<std::mutex> lock(mu_);
      reached_ = true;
      cv_.notify_all();
      cv_.wait(lock, [&] { return released_; });
    };
  }
  bool wait_reached(std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, limit, [&] { return reached_; });
  }
  void release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

 private:
  SavePoint point_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool reached_ = false, released_ = false;
};

TEST(AsyncSave, WritesTheBytesOfASynchronousSave) {
  harness::TempDir tmp("ckpt-async");
  torch::manual_seed(3);
  const auto tensors = model_tensors();
  harness::expect_ranks_pass(3, [&](harness::RankContext& ctx) {
    const auto content = testing::split_like_fsdp(tensors, 3)[ctx.rank];
    const nlohmann::json state = {{"step", 7}, {"note", "same"}};
    save_checkpoint(ctx.comm, tmp / "sync" / step_dir_name(7), content, state);
    AsyncCheckpointSaver saver(ctx.comm);
    saver.save(tmp / "async" / step_dir_name(7), content, state);
    auto finished = saver.wait();
    ASSERT_TRUE(finished.has_value());
    ASSERT_TRUE(finished->saved.has_value()) << finished->error;
    EXPECT_EQ(finished->saved->dir, tmp / "async" / step_dir_name(7));
    EXPECT_GE(finished->total_ms, finished->stage_ms);
    EXPECT_FALSE(saver.wait().has_value());  // reported once
    if (ctx.rank != 0) return;
    for (const std::string file :
         {"index.json", "rank-00000.safetensors", "rank-00001.safetensors", "rank-00002.safetensors"}) {
      const auto a = tmp / "async" / step_dir_name(7) / file, b = tmp / "sync" / step_dir_name(7) / file;
      ASSERT_TRUE(fs::exists(a)) << a;
      EXPECT_EQ(read_text(a), read_text(b)) << file;
    }
  });
}

TEST(AsyncSave, ReturnsBeforeTheCommitWhileTheCallersCollectivesGoOn) {
  harness::TempDir tmp("ckpt-async");
  const auto tensors = model_tensors();
  const fs::path dir = tmp / step_dir_name(1);
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    Gate gate(SavePoint::RankFileWritten);
    SaveOptions options;
    options.on_point = gate.hook();
    AsyncCheckpointSaver saver(ctx.comm);
    saver.save(dir, testing::split_like_fsdp(tensors, 2)[ctx.rank], {{"step", 1}}, options);
    // Every rank's writer is held after its rank file: the training collectives still run.
    EXPECT_TRUE(gate.wait_reached(std::chrono::seconds(60)));
    auto x = torch::full({4}, static_cast<float>(ctx.rank + 1));
    for (int i = 0; i < 3; ++i) ctx.comm.all_reduce(x, comm::ReduceOp::Sum);
    EXPECT_TRUE(bitwise_equal(x, torch::full({4}, 3.0f * 2 * 2)));
    EXPECT_TRUE(saver.pending());
    EXPECT_FALSE(saver.poll().has_value());
    EXPECT_FALSE(fs::exists(dir)) << "nothing is committed before every rank file is written";
    gate.release();
    auto finished = saver.wait();
    ASSERT_TRUE(finished && finished->saved);
    EXPECT_FALSE(saver.pending());
    auto reader = load_checkpoint(dir);
    reader.verify_all();
    for (const auto& [name, full] : tensors) EXPECT_TRUE(bitwise_equal(reader.read(name), full)) << name;
  });
}

TEST(AsyncSave, TheCheckpointHoldsTheTensorsAsTheyWereWhenSaveReturned) {
  harness::TempDir tmp("ckpt-async");
  const auto tensors = model_tensors();
  const fs::path dir = tmp / step_dir_name(2);
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    Gate gate(SavePoint::Started);  // held before a byte is written
    SaveOptions options;
    options.on_point = gate.hook();
    auto content = testing::split_like_fsdp(tensors, 2)[ctx.rank];
    AsyncCheckpointSaver saver(ctx.comm);
    saver.save(dir, content, {{"step", 2}}, options);
    EXPECT_TRUE(gate.wait_reached(std::chrono::seconds(60)));
    for (auto& t : content.tensors) t.rows.fill_(42);  // the next optimizer step, in place
    gate.release();
    ASSERT_TRUE(saver.wait()->saved);
    auto reader = load_checkpoint(dir);
    for (const auto& [name, full] : tensors) EXPECT_TRUE(bitwise_equal(reader.read(name), full)) << name;
  });
}

TEST(AsyncSave, AFailureIsRethrownOnEveryRankAndTheNextSaveWorks) {
  harness::TempDir tmp("ckpt-async");
  const auto tensors = model_tensors();
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    AsyncCheckpointSaver saver(ctx.comm);
    auto bad = testing::split_like_fsdp(tensors, 2)[ctx.rank];
    if (ctx.rank == 1) bad.tensors[0].dtype = at::kHalf;  // declared fp16, rows are fp32
    saver.save(tmp / step_dir_name(3), bad, {{"step", 3}});
    // poll() reports the failure once; the next save() rethrows it, on every rank.
    std::optional<FinishedSave> finished;
    for (int i = 0; i < 6000 && !finished; ++i) {
      finished = saver.poll();
      if (!finished) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(finished.has_value());
    EXPECT_FALSE(finished->saved.has_value());
    EXPECT_THAT(finished->error, HasSubstr("save_checkpoint, rank 1: tensor 'model/w' is declared F16 but its rows"));
    const std::string rethrown = error_of([&] {
      saver.save(tmp / step_dir_name(4), testing::split_like_fsdp(tensors, 2)[ctx.rank], {{"step", 4}});
    });
    EXPECT_EQ(rethrown, finished->error);
    EXPECT_FALSE(fs::exists(tmp / step_dir_name(3)));
    // The failure is reported once: the saver saves again.
    saver.save(tmp / step_dir_name(4), testing::split_like_fsdp(tensors, 2)[ctx.rank], {{"step", 4}});
    ASSERT_TRUE(saver.wait()->saved);
    EXPECT_EQ(find_latest_complete(tmp.path()).step, 4);
  });
}

// Saves `content` synchronously into `sync_dir` and compares every file of `async_dir`
// with it (rank 0, after both are committed).
void expect_same_files_as_a_synchronous_save(harness::RankContext& ctx, const fs::path& async_dir,
                                             const fs::path& sync_dir, const CheckpointContent& content,
                                             const nlohmann::json& state) {
  save_checkpoint(ctx.comm, sync_dir, content, state);
  if (ctx.rank != 0) return;
  EXPECT_EQ(folder_names(async_dir), folder_names(sync_dir));
  for (const auto& file : folder_names(sync_dir))
    EXPECT_EQ(read_text(async_dir / file), read_text(sync_dir / file)) << async_dir / file;
}

// torchtitan's async_with_pinned_mem keeps its staging buffers: the second save of the same
// shapes copies into the first save's host memory, and still writes the tensors' new bytes.
TEST(AsyncSave, ASaveOfTheSameShapesReusesTheHostBuffersAndWritesTheNewBytes) {
  harness::TempDir tmp("ckpt-async");
  torch::manual_seed(5);
  const auto tensors = model_tensors();
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    auto content = testing::split_like_fsdp(tensors, 2)[ctx.rank];
    AsyncCheckpointSaver saver(ctx.comm);
    saver.save(tmp / "async" / step_dir_name(1), content, {{"step", 1}});
    const auto first = saver.wait();
    ASSERT_TRUE(first && first->saved) << (first ? first->error : "");
    int64_t bytes = 0;
    for (const auto& t : content.tensors) bytes += t.rows.numel() * static_cast<int64_t>(t.rows.element_size());
    EXPECT_EQ(first->staged_bytes, bytes);
    EXPECT_EQ(first->staging_allocated_bytes, bytes);
    EXPECT_FALSE(first->staged_pinned);  // CPU rows: pageable buffers (pinning needs CUDA)
    std::vector<const void*> addresses;
    for (const auto& b : saver.staging_buffers()) addresses.push_back(b.data_ptr());
    ASSERT_EQ(addresses.size(), content.tensors.size());

    for (auto& t : content.tensors) t.rows.add_(1);  // the next optimizer step, in place
    saver.save(tmp / "async" / step_dir_name(2), content, {{"step", 2}});
    const auto second = saver.wait();
    ASSERT_TRUE(second && second->saved) << (second ? second->error : "");
    EXPECT_EQ(second->staged_bytes, bytes);
    EXPECT_EQ(second->staging_allocated_bytes, 0);
    const auto buffers = saver.staging_buffers();
    for (size_t i = 0; i < buffers.size(); ++i)
      EXPECT_EQ(buffers[i].data_ptr(), addresses[i]) << content.tensors[i].name;
    expect_same_files_as_a_synchronous_save(ctx, tmp / "async" / step_dir_name(2), tmp / "sync" / step_dir_name(2),
                                            content, {{"step", 2}});
  });
}

TEST(AsyncSave, AChangedShapeOrDtypeReallocatesOnlyThatTensorsBuffer) {
  harness::TempDir tmp("ckpt-async");
  torch::manual_seed(6);
  auto tensors = model_tensors();
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    AsyncCheckpointSaver saver(ctx.comm);
    saver.save(tmp / "async" / step_dir_name(1), testing::split_like_fsdp(tensors, 2)[ctx.rank], {{"step", 1}});
    ASSERT_TRUE(saver.wait()->saved);
    const auto before = saver.staging_buffers();

    auto changed = tensors;
    changed[0].second = torch::randn({9, 5});                        // model/w: another shape
    changed[1].second = changed[1].second.to(at::kFloat).add_(0.5);  // model/h: bf16 -> fp32
    const auto content = testing::split_like_fsdp(changed, 2)[ctx.rank];
    saver.save(tmp / "async" / step_dir_name(2), content, {{"step", 2}});
    const auto finished = saver.wait();
    ASSERT_TRUE(finished && finished->saved) << (finished ? finished->error : "");
    const auto after = saver.staging_buffers();
    ASSERT_EQ(after.size(), content.tensors.size());
    int64_t reallocated = 0;
    for (size_t i = 0; i < 2; ++i) {
      const auto& rows = content.tensors[i].rows;
      EXPECT_EQ(after[i].sizes(), rows.sizes()) << content.tensors[i].name;
      EXPECT_EQ(after[i].scalar_type(), rows.scalar_type()) << content.tensors[i].name;
      reallocated += rows.numel() * static_cast<int64_t>(rows.element_size());
    }
    EXPECT_EQ(finished->staging_allocated_bytes, reallocated);
    for (size_t i = 2; i < after.size(); ++i)
      EXPECT_EQ(after[i].data_ptr(), before[i].data_ptr()) << content.tensors[i].name;
    expect_same_files_as_a_synchronous_save(ctx, tmp / "async" / step_dir_name(2), tmp / "sync" / step_dir_name(2),
                                            content, {{"step", 2}});
  });
}

}  // namespace
}  // namespace fsdpp::checkpoint
