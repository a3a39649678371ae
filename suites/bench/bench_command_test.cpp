// `fsdpp bench` end to end on one small cell: the document, the history, and the delay
// that --inject-delay-pct sleeps inside each timed step; and which AdamW kernels
// `fsdpp bench-step` records; and that bench-step times the step `fsdpp train` runs.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/data/token_file.h"
#include "harness/results/results_document.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::harness {
namespace {

TEST(BenchCommand, InjectedDelayIsSleptInsideTheTimedStepsAndRecorded) {
  TempDir dir("bench-command");
  const double pct = 50;
  const std::string command = std::string(FSDPP_CLI_PATH) +
                              " bench --preset smoke --filter '^gpt2-tiny/unsharded/fp32/n1-gb8/ac0-det0$'"
                              " --repetitions 2 --inject-delay-pct 50 --out " +
                              (dir / "doc.json").string() + " --history " + (dir / "history").string();
  auto [code, output] = run_shell(command);
  ASSERT_EQ(code, 0) << output;
  auto doc = results::load_results(dir / "doc.json");
  ASSERT_EQ(doc["cells"].size(), 1u);
  const auto& cell = doc["cells"][0];
  ASSERT_EQ(cell["status"], "ok") << cell.value("reason", "");
  EXPECT_EQ(cell["config"]["injected_delay_pct"], pct);
  auto steps = cell["samples"]["step_ms"]["values"].get<std::vector<double>>();
  auto injected = cell["samples"]["injected_delay_ms"]["values"].get<std::vector<double>>();
  ASSERT_EQ(steps.size(), 2u * cell["config"]["timed_steps"].get<size_t>());
  ASSERT_EQ(injected.size(), steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    // The sleep is pct% of the work before it, and the clock stops after it: a step
    // lasts at least work + sleep = sleep * (1 + 100 / pct).
    EXPECT_GT(injected[i], 0) << i;
    EXPECT_GE(steps[i], injected[i] * (1 + 100 / pct) * (1 - 1e-9)) << i;
  }
  auto history = results::load_history(dir / "history", doc["machine"]["fingerprint"].get<std::string>());
  ASSERT_EQ(history.size(), 1u);
  EXPECT_EQ(history[0]["run_id"], doc["run_id"]);
}

TEST(BenchCommand, GpuCellsNeedingMoreGpusThanTheMachineHasAreUnavailableWithTheReason) {
  TempDir dir("bench-gpu");
  const std::string command = std::string(FSDPP_CLI_PATH) +
                              " bench --preset gpu --device cuda --filter '^llama-1B-s2048/.*/n8/' --out " +
                              (dir / "doc.json").string();
  auto [code, output] = run_shell(command);
  ASSERT_EQ(code, 0) << output;
  auto doc = results::load_results(dir / "doc.json");
  ASSERT_EQ(doc["cells"].size(), 4u) << doc.dump(1);  // fsdpp and FSDP2, AC off and on: no baseline at N=8
  const int gpus = doc["machine"]["gpu_count"].get<int>();
  if (gpus >= 8) GTEST_SKIP() << "this machine has " << gpus << " GPUs: the N=8 cells ran";
  for (const auto& cell : doc["cells"]) {
    EXPECT_EQ(cell["status"], "unavailable") << cell["id"];
    EXPECT_EQ(cell["reason"], "needs 8 GPUs, one per rank; this machine has " + std::to_string(gpus)) << cell["id"];
    EXPECT_EQ(cell["config"]["seq_len"], 2048);
    EXPECT_EQ(cell["config"]["mixed_precision"], "bf16");
  }
  EXPECT_NE(output.find("4 unavailable"), std::string::npos) << output;
}

// A double's bits, for bit-for-bit comparisons (-0.0 and 0.0, and NaN payloads, differ).
uint64_t bits_of(double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

// The record of a small one-rank CPU bench-step cell (gpt2 tiny, 2 warm-up and 3 timed
// steps) with `extra` flags.
nlohmann::json bench_step_record(const TempDir& dir, const std::string& extra) {
  const auto out = dir / "record.json";
  auto [code, output] = run_shell(std::string(FSDPP_CLI_PATH) +
                                  " bench-step --model-type gpt2 --model-size tiny --vocab-size 512 --strategy "
                                  "full_shard --nproc 1 --threads 1 --batch-size 2 --seq-len 16 --warmup 2 --steps 3"
                                  " --device cpu --mixed-precision fp32 --out " +
                                  out.string() + extra);
  EXPECT_EQ(code, 0) << output;
  std::ifstream in(out);
  return nlohmann::json::parse(in);
}

// bench-step records which AdamW kernels its optimizer ran: on the CPU, fsdpp's fused host
// kernel by default, torch's per-tensor step with --per-tensor-adamw; the two train to the
// same losses within fp32 round-off.
TEST(BenchStep, StepsAdamWWithTheFusedHostKernelUnlessAskedForThePerTensorStep) {
  TempDir dir("bench-step-adamw");
  auto run = [&](const std::string& extra) { return bench_step_record(dir, extra); };
  const auto fused = run(""), per_tensor = run(" --per-tensor-adamw");
  EXPECT_EQ(fused["adamw_step"], "fused-cpu");
  EXPECT_EQ(per_tensor["adamw_step"], "per-tensor");
  const auto a = fused["losses"].get<std::vector<double>>(), b = per_tensor["losses"].get<std::vector<double>>();
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-5 + 1.3e-6 * std::abs(b[i])) << "step " << i;
}

// Each timed step's phases are recorded, and they fit inside the step.
TEST(BenchStep, RecordsEachTimedStepsPhasesWithinItsTime) {
  TempDir dir("bench-step-phases");
  const auto record = bench_step_record(dir, "");
  const auto step_ms = record["step_ms"].get<std::vector<double>>();
  ASSERT_EQ(step_ms.size(), 3u);
  std::vector<double> phase_sum(step_ms.size(), 0.0);
  for (const char* phase : {"data", "forward", "backward", "optimizer"}) {
    SCOPED_TRACE(phase);
    const auto ms = record["phase_ms"].at(phase).get<std::vector<double>>();
    ASSERT_EQ(ms.size(), step_ms.size());
    for (size_t i = 0; i < ms.size(); ++i) {
      EXPECT_GE(ms[i], 0.0);
      phase_sum[i] += ms[i];
    }
  }
  for (size_t i = 0; i < step_ms.size(); ++i) {
    EXPECT_LE(phase_sum[i], step_ms[i]) << "step " << i;
    EXPECT_GT(phase_sum[i], 0.5 * step_ms[i]) << "step " << i;  // the phases are most of the step
  }
  EXPECT_GT(record["phase_ms"]["backward"][0].get<double>(), 0.0);
}

// With AC, the record says which recomputation ran, and --full-recompute (the A/B) trains
// the same losses bit for bit as the default, which skips each block's last projection.
TEST(BenchStep, RecordsWhichRecomputationRanAndBothTrainTheSameBits) {
  TempDir dir("bench-step-recompute");
  const auto skipping = bench_step_record(dir, " --activation-checkpointing");
  const auto full = bench_step_record(dir, " --activation-checkpointing --full-recompute");
  const auto plain = bench_step_record(dir, "");
  EXPECT_EQ(skipping["recompute"], "skips-summed");
  EXPECT_EQ(full["recompute"], "full");
  EXPECT_FALSE(plain.contains("recompute"));
  const auto a = skipping["losses"].get<std::vector<double>>(), b = full["losses"].get<std::vector<double>>();
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(bits_of(a[i]), bits_of(b[i])) << "step " << i;
  EXPECT_NE(a.front(), a.back());
}

TEST(BenchCommand, AFilterThatSelectsNothingIsAnError) {
  auto [code, output] = run_shell(std::string(FSDPP_CLI_PATH) + " bench --preset smoke --filter 'no-such-cell' --list");
  EXPECT_NE(code, 0);
  EXPECT_NE(output.find("no-such-cell"), std::string::npos) << output;
}

// Bench and train share one TrainStep (core/train/train_step.h): given the same model,
// data, seed and optimizer settings, bench-step's per-step losses are train's, bit for bit,
// on two ranks with clipping, and fp16 with its loss scaling. Both on the CPU by flag: train's
// default device is a GPU where there is one.
TEST(BenchStep, TrainsTheSameLossesAsFsdppTrainBitForBit) {
  TempDir dir("bench-step-same");
  const auto tokens_path = dir / "tokens.bin";
  data::write_llmc_tokens(tokens_path, at::remainder(at::arange(4000, at::kLong) * 7 + 3, 97));
  for (const std::string precision : {"fp32", "fp16"}) {
    SCOPED_TRACE(precision);
    const std::string common =
        " --nproc 2 --device cpu --model-type gpt2 --model-size tiny --vocab-size 97 --seq-len 16"
        " --batch-size 2 --seed 5 --mixed-precision " +
        precision + " --data " + tokens_path.string();
    auto [train_code, train_output] = run_shell(std::string(FSDPP_CLI_PATH) +
                                                " train --from-scratch --max-steps 5 --lr 3e-4 --weight-decay 0.1"
                                                " --lr-schedule constant --grad-clip 1 --save-dir " +
                                                dir.path().string() + " --experiment-name " + precision + common);
    ASSERT_EQ(train_code, 0) << train_output;
    std::vector<double> train_losses;
    std::ifstream metrics(dir / precision / "metrics.jsonl");
    for (std::string line; std::getline(metrics, line);) {
      const auto record = nlohmann::json::parse(line);
      if (record["kind"] == "train") train_losses.push_back(record["loss"].get<double>());
    }
    const auto cell_path = dir / (precision + "-cell.json");
    auto [bench_code, bench_output] = run_shell(std::string(FSDPP_CLI_PATH) +
                                                " bench-step --warmup 0 --steps 5 --strategy full_shard"
                                                " --out " +
                                                cell_path.string() + common);
    ASSERT_EQ(bench_code, 0) << bench_output;
    std::ifstream cell_file(cell_path);
    const auto bench_losses = nlohmann::json::parse(cell_file)["losses"].get<std::vector<double>>();
    ASSERT_EQ(train_losses.size(), 5u) << train_output;
    ASSERT_EQ(bench_losses.size(), 5u);
    for (size_t i = 0; i < 5; ++i)
      EXPECT_EQ(bits_of(train_losses[i]), bits_of(bench_losses[i]))
          << "step " << i + 1 << ": train " << train_losses[i] << ", bench-step " << bench_losses[i];
    EXPECT_NE(train_losses.front(), train_losses.back());  // it trained: the losses moved
  }
}

}  // namespace
}  // namespace fsdpp::harness
