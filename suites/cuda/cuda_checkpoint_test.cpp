// Asynchronous checkpoints of CUDA tensors (core/checkpoint/host_staging.h): save() stages
// the rows into pinned host buffers with non_blocking copies, synchronised before it returns,
// reuses the buffers on the next save, and writes the files of a synchronous save; and
// `fsdpp train --device cuda --async-checkpoint` trains and saves as the same run without
// it. Every test needs a GPU and says so when skipped.
//
// As in cuda_test.cpp, the parent test process never touches CUDA before the ranks fork (a
// CUDA context does not survive fork): GPUs are counted from /dev/nvidia*. The names here
// differ from cuda_test.cpp's, which the unity build may compile in the same unit.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/checkpoint/async_saver.h"
#include "core/checkpoint/checkpoint_scan.h"
#include "core/data/token_file.h"
#include "core/runtime/device.h"
#include "harness/testing/multirank.h"
#include "harness/testing/temp_dir.h"
#include "harness/testing/token_streams.h"
#include "suites/checkpoint/checkpoint_fixtures.h"
#include "suites/cli/fsdpp_binary.h"
#include "suites/cuda/cuda_testing.h"

namespace fsdpp::cuda_checkpoint_test {
namespace {

namespace fs = std::filesystem;
using checkpoint::AsyncCheckpointSaver;
using checkpoint::CheckpointContent;
using checkpoint::CheckpointTensor;
using checkpoint::step_dir_name;
using checkpoint::testing::bitwise_equal;
using checkpoint::testing::folder_names;
using checkpoint::testing::read_text;

// One rank's tensors on `device`, as a trainer hands them to save(): a matrix still being
// produced by queued kernels, a bf16 tensor, a non-contiguous view, and a CPU tensor (the
// trainer's rng/cpu, whose buffer stays pageable).
struct DeviceTensors {
  at::Tensor big, half, base, rng;
  at::Tensor weight;  // what the queued chain multiplies `big` by

  DeviceTensors(at::Device device, int64_t n) {
    const auto on = torch::TensorOptions().device(device);
    big = torch::rand({n, n}, on);
    weight = torch::randn({n, n}, on).div_(std::sqrt(static_cast<double>(n)));
    half = torch::randn({6, 10}, on.dtype(torch::kBFloat16));
    base = torch::randn({5, 7}, on);
    rng = torch::randint(0, 256, {1, 16}, torch::kByte);
  }
  // Queues `steps` matrix products into `big`, in place: the copy save() makes must wait
  // for them on the stream, and save() must wait for the copy.
  void queue_work(int steps) {
    for (int i = 0; i < steps; ++i) big.copy_(torch::tanh(big.matmul(weight)));
  }
  // Every tensor's values change in place (the next optimizer step).
  void overwrite(double value) {
    for (auto* t : {&big, &half, &base}) t->fill_(value);
    rng.fill_(static_cast<int64_t>(value) & 0xff);
  }
  // A device-side copy of the current values (queued on the stream: no host wait).
  DeviceTensors snapshot() const {
    DeviceTensors s = *this;
    s.big = big.clone();
    s.half = half.clone();
    s.base = base.clone();
    s.rng = rng.clone();
    return s;
  }
  CheckpointContent content() const {
    CheckpointContent c;
    c.mesh = {"full_shard", 1, 1};
    c.tensors.push_back(CheckpointTensor{"model/big", big.sizes().vec(), at::kFloat, 0, big});
    c.tensors.push_back(CheckpointTensor{"model/half", {6, 10}, at::kBFloat16, 0, half});
    c.tensors.push_back(CheckpointTensor{"optim/base_t", {7, 5}, at::kFloat, 0, base.t()});
    c.tensors.push_back(CheckpointTensor{"rng/cpu", {1, 16}, at::kByte, 0, rng});
    return c;
  }
};

// Saves `content` synchronously into `sync_dir` and expects `async_dir`'s files to hold its bytes.
void expect_files_of_a_synchronous_save(comm::Communicator& comm, const fs::path& async_dir, const fs::path& sync_dir,
                                        const CheckpointContent& content, const nlohmann::json& state) {
  checkpoint::save_checkpoint(comm, sync_dir, content, state);
  EXPECT_EQ(folder_names(async_dir), folder_names(sync_dir));
  for (const auto& file : folder_names(sync_dir))
    EXPECT_EQ(read_text(async_dir / file), read_text(sync_dir / file)) << async_dir / file;
}

// Two asynchronous saves of `device` tensors by one rank, each called while kernels that
// produce its rows are still queued, the tensors overwritten right after save() returned.
// Each time: the host buffers already hold the rows when save() returns, are pinned exactly
// for CUDA rows, and are those of the first save in the second; the committed files are a
// synchronous save's of the rows as they were.
void check_async_save_on(harness::RankContext& ctx, at::Device device, const fs::path& dir) {
  runtime::set_current_device(device);
  torch::manual_seed(17);
  const bool cuda = device.is_cuda();
  DeviceTensors tensors(device, cuda ? 2048 : 64);  // 16 MB on the GPU: each product ~0.3 ms
  AsyncCheckpointSaver saver(ctx.comm);
  std::vector<const void*> first_addresses;
  for (int64_t step : {1, 2}) {
    SCOPED_TRACE("save " + std::to_string(step));
    tensors.queue_work(cuda ? 40 : 2);
    const auto expected = tensors.snapshot();
    const nlohmann::json state = {{"step", step}};
    const auto async_dir = dir / "async" / step_dir_name(step);
    saver.save(async_dir, tensors.content(), state);
    // save() returned: the staged bytes are final without any further wait (a missing
    // stream synchronisation shows here as the previous save's bytes, or a partial copy).
    const auto buffers = saver.staging_buffers();
    ASSERT_EQ(buffers.size(), 4u);
    const auto staged_big = buffers[0].clone();  // a host memcpy: no CUDA synchronisation
    tensors.overwrite(-static_cast<double>(step));
    const auto finished = saver.wait();
    ASSERT_TRUE(finished && finished->saved) << (finished ? finished->error : "no outcome");
    EXPECT_TRUE(bitwise_equal(staged_big, expected.big));

    EXPECT_EQ(finished->staged_pinned, cuda);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(buffers[i].is_pinned(), cuda) << "buffer " << i;
    EXPECT_FALSE(buffers[3].is_pinned()) << "rows on the CPU are staged into pageable memory";
    for (const auto& b : buffers) EXPECT_TRUE(b.device().is_cpu() && b.is_contiguous());
    if (step == 1) {
      EXPECT_EQ(finished->staging_allocated_bytes, finished->staged_bytes);
      for (const auto& b : buffers) first_addresses.push_back(b.data_ptr());
    } else {
      EXPECT_EQ(finished->staging_allocated_bytes, 0);
      for (size_t i = 0; i < buffers.size(); ++i) EXPECT_EQ(buffers[i].data_ptr(), first_addresses[i]) << i;
    }
    expect_files_of_a_synchronous_save(ctx.comm, async_dir, dir / "sync" / step_dir_name(step), expected.content(),
                                       state);
  }
}

// What `fsdpp train` wrote into <dir>/<name>: its losses and checkpoint records.
struct TrainOutcome {
  int code = -1;
  std::string output;
  std::vector<double> losses;
  std::vector<nlohmann::json> checkpoints;
};

TrainOutcome run_train(const harness::TempDir& dir, const std::string& name, const std::string& flags) {
  TrainOutcome r;
  std::tie(r.code, r.output) = harness::run_shell(kFsdpp + " train --save-dir " + dir.path().string() +
                                                  " --experiment-name " + name + " " + flags);
  std::ifstream in(dir.path() / name / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record["kind"] == "train") r.losses.push_back(record["loss"].get<double>());
    if (record["kind"] == "checkpoint") r.checkpoints.push_back(record);
  }
  return r;
}

// `fsdpp train --device <device> --async-checkpoint` against the same run without it: the
// same losses, the same rank files, and records saying whether the staging was pinned.
void check_async_train_on(const std::string& device) {
  harness::TempDir dir("ckpt-cuda-cli");
  const std::string flags = "--nproc 1 --device " + device +
                            " --from-scratch --model-size tiny --vocab-size 64 --seq-len 16 --batch-size 4 "
                            "--max-steps 4 --ckpt-freq 2 --keep-last 0 --lr 3e-3 --adam-eps 1e-6 --data " +
                            harness::write_markov_tokens(dir.path(), 4000, 64).string();
  const auto sync = run_train(dir, "sync", flags);
  ASSERT_EQ(sync.code, 0) << sync.output;
  const auto async = run_train(dir, "async", flags + " --async-checkpoint");
  ASSERT_EQ(async.code, 0) << async.output;
  ASSERT_EQ(async.losses.size(), 4u);
  EXPECT_EQ(async.losses, sync.losses);
  ASSERT_EQ(sync.checkpoints.size(), 2u) << sync.output;
  ASSERT_EQ(async.checkpoints.size(), 2u) << async.output;
  for (const auto& record : sync.checkpoints) EXPECT_FALSE(record.contains("staged_pinned")) << record;
  for (const auto& record : async.checkpoints) {
    EXPECT_FALSE(record.contains("error")) << record;
    EXPECT_EQ(record["async"], true);
    ASSERT_TRUE(record.contains("staged_pinned")) << record;
    EXPECT_EQ(record["staged_pinned"].get<bool>(), device != "cpu") << record;
  }
  for (int64_t step : {2, 4}) {
    const auto a = dir / "async" / "checkpoints" / step_dir_name(step) / "rank-00000.safetensors";
    const auto b = dir / "sync" / "checkpoints" / step_dir_name(step) / "rank-00000.safetensors";
    ASSERT_TRUE(fs::exists(a)) << a;
    EXPECT_EQ(read_text(a), read_text(b)) << a;
  }
}

TEST(CudaCheckpoint, AsyncSaveStagesIntoReusedPinnedBuffersAndWritesTheBytesOfASynchronousSave) {
  REQUIRE_GPUS(1);
  harness::TempDir dir("ckpt-cuda");
  harness::expect_ranks_pass(
      1, [&](harness::RankContext& ctx) { check_async_save_on(ctx, at::Device(at::kCUDA, 0), dir.path()); },
      cuda_testing::with_env());
}

TEST(CudaCheckpoint, TrainWithAsyncCheckpointOnCudaMatchesTheSynchronousRun) {
  REQUIRE_GPUS(1);
  check_async_train_on("cuda");
}

}  // namespace
}  // namespace fsdpp::cuda_checkpoint_test
