// Profile traces read and summed per step (harness/results/op_profile.h), and
// `fsdpp results profile` on traces of both systems.
#include "harness/results/op_profile.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/io/atomic_file.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::results {
namespace {

namespace fs = std::filesystem;
using harness::run_shell;
using harness::TempDir;
using nlohmann::json;
using ::testing::HasSubstr;

json complete(const std::string& cat, const std::string& name, double dur_us) {
  return {{"ph", "X"}, {"cat", cat}, {"name", name}, {"ts", 0}, {"dur", dur_us}, {"pid", 0}, {"tid", 0}};
}

// Two steps of 10 ms: a gemm kernel twice per step (3 ms each), one softmax kernel
// (1 ms), and CPU operators that nest (aten::linear holds aten::addmm).
fs::path write_trace(const TempDir& dir, const std::string& name, double gemm_us) {
  json events = json::array();
  for (int step = 0; step < 2; ++step) {
    events.push_back(complete("user_annotation", "fsdpp.step", 10000));
    events.push_back(complete("kernel", "sm90_gemm", gemm_us));
    events.push_back(complete("kernel", "sm90_gemm", gemm_us));
    events.push_back(complete("Kernel", "softmax", 1000));  // older Kineto capitalised it
    events.push_back(complete("cpu_op", "aten::linear", 500));
    events.push_back(complete("cpu_op", "aten::addmm", 400));
  }
  events.push_back({{"ph", "i"}, {"cat", "kernel"}, {"name", "instant, no duration"}, {"ts", 0}});
  events.push_back({{"ph", "f"}, {"cat", "ac2g"}, {"name", "flow"}, {"ts", 0}});
  const fs::path file = dir / name;
  io::write_file_atomic(file, json{{"schemaVersion", 1}, {"traceEvents", events}}.dump());
  return file;
}

TEST(OpProfile, SumsCompleteEventsByCategoryAndNameAndCountsTheAnnotatedSteps) {
  TempDir dir("op-profile");
  auto p = read_op_profile(write_trace(dir, "a.json", 3000).string());
  EXPECT_EQ(p.steps, 2);
  EXPECT_DOUBLE_EQ(p.steps_us, 20000);
  EXPECT_DOUBLE_EQ(p.category_us.at("kernel"), 2 * (3000 + 3000 + 1000));
  EXPECT_DOUBLE_EQ(p.category_us.at("cpu_op"), 2 * (500 + 400));
  EXPECT_FALSE(p.category_us.count("user_annotation"));  // the steps are not an operator
  ASSERT_FALSE(p.ops.empty());
  EXPECT_EQ(p.ops[0].name, "sm90_gemm");  // largest first
  EXPECT_EQ(p.ops[0].count, 4);
  EXPECT_DOUBLE_EQ(p.ops[0].total_us, 12000);
  EXPECT_EQ(default_profile_category({p}), "kernel");
}

TEST(OpProfile, TheTablePutsEachProfilesTimePerStepSideBySideWithRatiosToTheFirst) {
  TempDir dir("op-profile");
  auto a = read_op_profile(write_trace(dir, "fsdpp.json", 3000).string());
  auto b = read_op_profile(write_trace(dir, "torch.json", 4500).string());
  const std::string table = profile_table({a, b}, "kernel", 1);
  // gemm: 2 x 3 ms = 6 ms per step against 9 ms: 1.50; listed alone (--top 1).
  EXPECT_THAT(table, HasSubstr("| `sm90_gemm` | 6.000 (2) | 9.000 (2) | 1.50 |\n"));
  EXPECT_THAT(table, ::testing::Not(HasSubstr("softmax")));
  EXPECT_THAT(table, HasSubstr("| all kernel | 7.00 | 10.00 | 1.43 |\n"));
  EXPECT_THAT(table, HasSubstr("| step (fsdpp.step) | 10.00 | 10.00 | 1.00 |"));
}

TEST(OpProfile, ABareArrayOfOperatorsAsPyTorchWritesWithoutKinetoIsReadToo) {
  TempDir dir("op-profile");
  auto bare = json::array();
  for (const char* name : {"fsdpp.step", "aten::mm", "aten::mm", "aten::add"}) {
    json e = complete("", name, std::string(name) == "fsdpp.step" ? 100 : 10);
    e.erase("cat");  // torch.profiler's legacy export has no categories
    bare.push_back(e);
  }
  io::write_file_atomic(dir / "bare.json", bare.dump());
  auto p = read_op_profile((dir / "bare.json").string());
  EXPECT_EQ(p.steps, 1);
  EXPECT_DOUBLE_EQ(p.category_us.at("cpu_op"), 30);
  EXPECT_EQ(p.ops[0].name, "aten::mm");
  EXPECT_EQ(p.ops[0].count, 2);
  EXPECT_EQ(default_profile_category({p}), "cpu_op");
}

TEST(OpProfile, AFileThatIsNotATraceOfAnnotatedStepsIsRefusedByName) {
  TempDir dir("op-profile");
  io::write_file_atomic(dir / "broken.json", "{\"traceEvents\": [");
  io::write_file_atomic(dir / "object.json", "{\"events\": []}");
  io::write_file_atomic(dir / "nosteps.json", json{{"traceEvents", json::array({complete("kernel", "k", 1)})}}.dump());
  for (const char* name : {"missing.json", "broken.json", "object.json", "nosteps.json"}) {
    const std::string path = (dir / name).string();
    try {
      read_op_profile(path);
      ADD_FAILURE() << name << " was accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_THAT(e.what(), HasSubstr(path)) << name;
    }
  }
  auto [code, output] = run_shell(std::string(FSDPP_CLI_PATH) + " results profile " + (dir / "nosteps.json").string());
  EXPECT_EQ(code, 2) << output;
  EXPECT_THAT(output, HasSubstr("no 'fsdpp.step' annotation"));
}

// Both systems' --profile-trace on the same tiny CPU cell: each trace covers exactly the
// timed steps, and `fsdpp results profile` lists them side by side.
TEST(OpProfile, BenchStepAndThePeerTraceTheirTimedStepsAndReadSideBySide) {
  TempDir dir("op-profile");
  const std::string fsdpp_trace = (dir / "fsdpp.trace.json").string(), peer_trace = (dir / "peer.trace.json").string();
  const std::string shape = " --batch-size 2 --seq-len 16 --warmup 1 --steps 3 --device cpu --mixed-precision fp32";
  auto [code, output] = run_shell(std::string(FSDPP_CLI_PATH) +
                                  " bench-step --model-type gpt2 --model-size tiny --vocab-size 512 --strategy "
                                  "full_shard --nproc 2 --threads 1" +
                                  shape + " --profile-trace " + fsdpp_trace);
  ASSERT_EQ(code, 0) << output;
  auto fsdpp = read_op_profile(fsdpp_trace);
  EXPECT_EQ(fsdpp.steps, 3);
  EXPECT_GT(fsdpp.category_us["cpu_op"], 0);
  EXPECT_FALSE(fs::exists(fsdpp_trace + ".partial"));

  // The Python whose torch this build uses (ci/setup.sh's .venv): part of the set-up, so
  // its absence is a failure, not a skip.
  const std::string python = FSDPP_PYTHON;
  auto [python_code, python_output] = run_shell(python + " -c 'import torch, numpy' 2>&1");
  ASSERT_EQ(python_code, 0) << "no torch and numpy in " << python << ": " << python_output;
  const std::string config = (dir / "config.json").string();
  io::write_file_atomic(config, json{{"model_type", "gpt2"},
                                     {"vocab_size", 512},
                                     {"n_positions", 64},
                                     {"n_embd", 64},
                                     {"n_layer", 2},
                                     {"n_head", 4}}
                                    .dump());
  std::tie(code, output) = run_shell(python + " " + std::string(FSDPP_SOURCE_DIR) +
                                     "/harness/peers/torch_peer.py --mode single --model-config " + config +
                                     " --threads 1" + shape + " --profile-trace " + peer_trace + " 2>&1");
  ASSERT_EQ(code, 0) << output;
  auto peer = read_op_profile(peer_trace);
  EXPECT_EQ(peer.steps, 3);
  std::tie(code, output) =
      run_shell(std::string(FSDPP_CLI_PATH) + " results profile " + fsdpp_trace + " " + peer_trace + " --top 5");
  ASSERT_EQ(code, 0) << output;
  EXPECT_THAT(output, HasSubstr("Top 5 cpu_op names"));
  EXPECT_THAT(output, HasSubstr("[2]/[1]"));
}

}  // namespace
}  // namespace fsdpp::results
