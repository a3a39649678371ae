// The host waits for the device only where a step's figures are read: on log steps (the
// first, every --log-freq, the last), and where an evaluation or a checkpoint is due, as
// torchtitan reads its loss on log steps only. The other steps of train() queue their work
// and go on; on CUDA the host runs ahead of the kernels. HostReadCounter counts the reads
// (harness/testing/host_reads.h); each step read is two: its loss and its gradient norm.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/train/run_inputs.h"
#include "core/train/trainer.h"
#include "harness/testing/host_reads.h"
#include "harness/testing/multirank.h"
#include "harness/testing/token_streams.h"

namespace fsdpp {
namespace {

// GPT-2 tiny from scratch, 2 micro-batches a step, clipping on: 9 steps, logged at 1, 4, 8
// and 9; the only checkpoint at the end.
train::TrainConfig tiny_run(const harness::RankContext& ctx, const std::string& name) {
  const auto data_dir = ctx.shared_dir / ("data-rank" + std::to_string(ctx.rank));
  std::filesystem::create_directories(data_dir);
  train::TrainConfig c;
  c.from_scratch = true;
  c.model_type = "gpt2";
  c.model_size = "tiny";
  c.vocab_size = 64;
  c.data = harness::write_markov_tokens(data_dir, 4000, 64).string();
  c.seq_len = 16;
  c.batch_size = 2;
  c.grad_accum_steps = 2;
  c.max_steps = 9;
  c.log_freq = 4;
  c.grad_clip = 1.0;
  c.save_dir = (ctx.shared_dir / "runs").string();
  c.experiment_name = name;
  return c;
}

std::map<int64_t, int64_t> reads_of(harness::RankContext& ctx, const train::TrainConfig& c) {
  const auto inputs = train::preflight(c);
  harness::HostReadsPerStep reads;
  train::train(ctx.comm, c, inputs, 0, &reads);
  return reads.reads();
}

// The train records of a run's metrics.jsonl, by step.
std::map<int64_t, nlohmann::json> train_records(const train::TrainConfig& c) {
  std::ifstream in(std::filesystem::path(c.save_dir) / c.experiment_name / "metrics.jsonl");
  std::map<int64_t, nlohmann::json> records;
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    if (record["kind"] == "train") records[record["step"].get<int64_t>()] = record;
  }
  return records;
}

class HostSyncs : public ::testing::TestWithParam<std::string> {};

TEST_P(HostSyncs, AStepReadsNothingFromTheDeviceUnlessItIsLoggedAndThenReadsEveryQueuedStep) {
  const std::string strategy = GetParam();
  harness::expect_ranks_pass(2, [&](harness::RankContext& ctx) {
    auto c = tiny_run(ctx, "run");
    c.fsdp.strategy = fsdp::parse_strategy(strategy);
    const auto reads = reads_of(ctx, c);
    ASSERT_EQ(reads.size(), 9u);
    for (int64_t step : {2, 3, 5, 6, 7}) EXPECT_EQ(reads.at(step), 0) << "step " << step;
    // Step 4 reads steps 2-4, step 8 steps 5-8: two reads each.
    EXPECT_EQ(reads.at(4), 2 * 3);
    EXPECT_EQ(reads.at(8), 2 * 4);
    EXPECT_GE(reads.at(1), 2);
    EXPECT_GE(reads.at(9), 2);
    if (ctx.rank != 0) return;
    // Every step is in metrics.jsonl, its loss and norm read.
    const auto records = train_records(c);
    ASSERT_EQ(records.size(), 9u);
    for (const auto& [step, r] : records) {
      EXPECT_TRUE(r["loss"].is_number()) << r.dump();
      EXPECT_TRUE(r["grad_norm"].is_number()) << r.dump();
    }
  });
}

// Dynamic loss scaling decides on the host whether to skip the optimizer step (PyTorch's
// GradScaler reads found_inf too): one read in every step, and nothing else.
TEST(HostSyncsWithLossScaling, EachStepReadsOnlyWhetherAnyRankOverflowed) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto c = tiny_run(ctx, "scaled");
    c.loss_scaling = true;
    const auto reads = reads_of(ctx, c);
    for (int64_t step : {2, 3, 5, 6, 7}) EXPECT_EQ(reads.at(step), 1) << "step " << step;
    EXPECT_EQ(reads.at(4), 1 + 2 * 3);
    EXPECT_EQ(reads.at(8), 1 + 2 * 4);
  });
}

INSTANTIATE_TEST_SUITE_P(Strategies, HostSyncs, ::testing::Values("full_shard", "shard_grad_op", "no_shard"));

// Reading late changes no figure: the same run logged at every step (read at every step)
// and every fourth writes the same records, bit for bit, but for the times and memory.
TEST(DeferredReads, ARunLoggedEveryFourthStepWritesTheLossesAndNormsOfOneLoggedEveryStep) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto every = tiny_run(ctx, "every");
    every.log_freq = 1;
    auto fourth = tiny_run(ctx, "fourth");
    train::train(ctx.comm, every, train::preflight(every), 0);
    train::train(ctx.comm, fourth, train::preflight(fourth), 0);
    if (ctx.rank != 0) return;
    const auto a = train_records(every), b = train_records(fourth);
    ASSERT_EQ(a.size(), 9u);
    ASSERT_EQ(b.size(), 9u);
    for (const auto& [step, r] : a) {
      EXPECT_EQ(r["loss"].get<double>(), b.at(step)["loss"].get<double>()) << "step " << step;
      EXPECT_EQ(r["grad_norm"].get<double>(), b.at(step)["grad_norm"].get<double>()) << "step " << step;
      EXPECT_EQ(r["tokens"], b.at(step)["tokens"]);
    }
  });
}

}  // namespace
}  // namespace fsdpp
