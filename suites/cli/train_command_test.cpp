// `fsdpp train` end to end through the binary: fine-tuning lowers held-out perplexity
// and exports a folder the other commands load; the loss curve does not depend on the
// number of ranks; the data order and the logged loss are the documented ones; the
// metrics file has its documented keys; bad input is one error line, and so is a
// run-time failure without --nproc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <sstream>

#include "core/data/sampler.h"
#include "core/data/token_dataset.h"
#include "core/data/token_file.h"
#include "core/models/generate.h"
#include "core/models/presets.h"
#include "core/optim/lr_schedule.h"
#include "harness/oracle/tolerance.h"
#include "harness/testing/assets.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp {
namespace {

namespace fs = std::filesystem;
using harness::run_shell;
using harness::TempDir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kFsdpp = FSDPP_CLI_PATH;


struct TrainRun {
  int code = -1;
  std::string output;
  nlohmann::json run;                      // the "run" record
  std::vector<nlohmann::json> train, eval;  // records by kind, in file order
  std::vector<double> losses() const {
    std::vector<double> out;
    for (const auto& r : train) out.push_back(r["loss"].get<double>());
    return out;
  }
};

// Runs `fsdpp train` into <dir>/<name> and reads its metrics.jsonl.
TrainRun train(const TempDir& dir, const std::string& name, const std::string& flags) {
  TrainRun r;
  std::tie(r.code, r.output) = run_shell(kFsdpp + " train --save-dir " + dir.path().string() +
                                         " --experiment-name " + name + " " + flags);
  std::ifstream in(dir.path() / name / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    auto record = nlohmann::json::parse(line);
    auto kind = record["kind"].get<std::string>();
    (kind == "run" ? r.run : kind == "train" ? r.train.emplace_back() : r.eval.emplace_back()) = record;
  }
  return r;
}

// A learnable token stream: each token mostly follows from the previous one, so the
// loss visibly falls within a few steps (random tokens would leave it flat).
fs::path write_markov_tokens(const TempDir& dir, int64_t count, int64_t vocab) {
  torch::manual_seed(11);
  auto noise = torch::randint(0, 3, {count}, torch::kLong);
  auto tokens = torch::empty({count}, torch::kLong);
  int64_t t = 1;
  for (int64_t i = 0; i < count; ++i) {
    t = (t * 5 + 3 + noise[i].item<int64_t>()) % vocab;
    tokens[i] = t;
  }
  auto path = dir / "tokens.bin";
  data::write_llmc_tokens(path, tokens);
  return path;
}

// A path for /bin/sh, quoted so that a "train_*.tok" pattern reaches fsdpp unexpanded.
std::string quoted(const fs::path& path) { return "'" + path.string() + "'"; }

// The exit status (128 + N for a process killed by signal N) and stderr only, as lines.
std::pair<int, std::vector<std::string>> status_and_error_lines(const std::string& command) {
  auto [code, output] = run_shell("(" + command + " 2>&1 1>/dev/null)");
  std::vector<std::string> lines;
  std::istringstream in(output);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  return {code, lines};
}

// stderr only, as lines.
std::vector<std::string> error_lines(const std::string& command) {
  auto [code, lines] = status_and_error_lines(command);
  EXPECT_NE(code, 0) << command;
  return lines;
}

// --- must show 1 -------------------------------------------------------------------

TEST(TrainCommand, FineTuningOnARealCorpusLowersHeldOutPerplexityAndExportsAnHfFolder) {
  TempDir dir;
  const auto tok = harness::test_asset("gpt2").string();
  auto prepare = [&](const std::string& corpus, const std::string& slice, const std::string& out) {
    auto [code, output] = run_shell(kFsdpp + " data prepare --input " + harness::test_asset("corpora/" + corpus).string() +
                                    " --output " + (dir / out).string() + " --tokenizer " + tok + " " + slice);
    ASSERT_EQ(code, 0) << output;
  };
  prepare("sotu", "--start-idx 200 --end-idx 215", "sotu");
  prepare("moby-dick", "--start-idx 0 --end-idx 30 --eval-fraction 0.2", "moby");
  const std::string common = " --seq-len 64 --batch-size 4 --lr 2e-3 --warmup-steps 2 --log-freq 5 --tokenizer " + tok;
  auto base = train(dir, "pretrain",
                    "--from-scratch --model-type gpt2 --model-size tiny --max-steps 30 --data " +
                        quoted(dir / "sotu" / "train_*.tok") + common);
  ASSERT_EQ(base.code, 0) << base.output;

  auto tuned = train(dir, "finetune",
                     "--nproc 2 --strategy full_shard --model " + (dir / "pretrain" / "hf").string() +
                         " --max-steps 20 --data " + quoted(dir / "moby" / "train_*.tok") + " --eval-data " +
                         quoted(dir / "moby" / "eval_*.tok") + common);
  ASSERT_EQ(tuned.code, 0) << tuned.output;
  EXPECT_EQ(tuned.run["world_size"], 2);
  ASSERT_EQ(tuned.eval.size(), 2u);  // before and after
  const double before = tuned.eval.front()["eval_perplexity"], after = tuned.eval.back()["eval_perplexity"];
  EXPECT_LT(after, 0.8 * before) << "held-out perplexity " << before << " -> " << after;

  // The exported folder is what `fsdpp eval` and `fsdpp generate` load.
  const auto hf = (dir / "finetune" / "hf").string();
  auto [code, json] = run_shell(kFsdpp + " eval --json --seq-len 64 --model " + hf + " --data " +
                                quoted(dir / "moby" / "eval_*.tok"));
  ASSERT_EQ(code, 0) << json;
  EXPECT_NEAR(nlohmann::json::parse(json)["loss"].get<double>(), tuned.eval.back()["eval_loss"].get<double>(), 1e-4);
  auto [gen_code, text] = run_shell(kFsdpp + " generate --max-new-tokens 8 --temperature 0 --prompt 'Call me' --model " + hf);
  ASSERT_EQ(gen_code, 0) << text;
  EXPECT_THAT(text, StartsWith("Call me"));
  EXPECT_GT(text.size(), std::string("Call me\n").size());
}

// --- must show 2 -------------------------------------------------------------------

class TrainEquivalence : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainEquivalence, LossCurveIsTheSameOnOneTwoAndFourRanks) {
  TempDir dir;
  const auto data = write_markov_tokens(dir, 4000, 32).string();
  // AdamW at lr 3e-3 / eps 1e-6, the equivalence runner's policy (harness/equiv/equivalence.h):
  // with eps 1e-8 Adam magnifies the round-off of near-zero gradient elements (summed in
  // another order on N ranks) by up to lr/eps, past fp32 tolerance within a few steps.
  const std::string common = "--from-scratch --model-type " + GetParam() +
                             " --model-size tiny --vocab-size 32 --seq-len 16 --max-steps 10 --lr 3e-3 --adam-eps 1e-6 "
                             "--seed 5 --data " + data;
  // Global batch 4 windows in every run: 1x4, 2x2, 4x1, and 2 ranks x 1 x 2 micro-steps.
  auto one = train(dir, "n1", common + " --batch-size 4");
  auto two = train(dir, "n2", common + " --nproc 2 --batch-size 2");
  auto four = train(dir, "n4", common + " --nproc 4 --batch-size 1");
  auto accum = train(dir, "n2a2", common + " --nproc 2 --batch-size 1 --grad-accum-steps 2");
  for (const TrainRun* r : {&one, &two, &four, &accum}) ASSERT_EQ(r->code, 0) << r->output;
  ASSERT_EQ(one.losses().size(), 10u);
  EXPECT_LT(one.losses().back(), one.losses().front() - 0.1) << "the model must learn, or the comparison says little";
  const auto tol = harness::default_tolerance(at::kFloat);  // assert_close's fp32 rtol/atol
  double max_diff = 0;
  for (const TrainRun* r : {&two, &four, &accum}) {
    ASSERT_EQ(r->losses().size(), one.losses().size());
    for (size_t s = 0; s < one.losses().size(); ++s) {
      EXPECT_NEAR(r->losses()[s], one.losses()[s], tol.atol + tol.rtol * std::abs(one.losses()[s]))
          << "world " << r->run["world_size"] << " step " << s + 1;
      max_diff = std::max(max_diff, std::abs(r->losses()[s] - one.losses()[s]));
    }
  }
  std::printf("%s: loss %.4f -> %.4f, largest difference from 1 rank %.3g\n", GetParam().c_str(),
              one.losses().front(), one.losses().back(), max_diff);
}

INSTANTIATE_TEST_SUITE_P(Families, TrainEquivalence, ::testing::Values("gpt2", "opt", "llama"));

// --- the documented data order and loss --------------------------------------------

TEST(TrainCommand, FirstStepLossIsTheInitialModelsMeanLossOnTheSamplersFirstGlobalBatch) {
  TempDir dir;
  const auto data = write_markov_tokens(dir, 3000, 256);
  const int64_t seq = 16, global = 2 * 3;  // 2 ranks x batch 3
  auto dataset = data::TokenDataset::open(data.string());
  auto initial_loss_on = [&](const std::vector<int64_t>& windows) {
    auto lm = models::build_causal_lm(models::from_scratch_config("gpt2", "tiny", 256), "tiny");
    models::init_from_scratch(lm, 9);
    torch::NoGradGuard no_grad;
    auto [inputs, targets] = dataset.windows(windows, seq);
    auto logits = lm.logits(inputs);
    return torch::nn::functional::cross_entropy(logits.reshape({-1, 256}), targets.reshape({-1})).item<double>();
  };
  for (bool shuffle : {false, true}) {
    const std::string name = shuffle ? "shuffled" : "ordered";
    auto r = train(dir, name,
                   "--nproc 2 --from-scratch --model-size tiny --vocab-size 256 --seq-len 16 --batch-size 3 "
                   "--max-steps 1 --seed 9 --data " + data.string() + (shuffle ? "" : " --no-shuffle"));
    ASSERT_EQ(r.code, 0) << r.output;
    data::SamplerOptions o;
    o.num_windows = dataset.num_windows(seq);
    o.batch_per_rank = 3;
    o.world_size = 2;
    o.shuffle = shuffle;
    o.seed = 9;
    auto windows = data::DistributedSampler(o).global_batch_windows();
    if (!shuffle) {
      EXPECT_EQ(windows, (std::vector<int64_t>{0, 1, 2, 3, 4, 5}));
    }
    ASSERT_EQ(static_cast<int64_t>(windows.size()), global);
    EXPECT_NEAR(r.losses().at(0), initial_loss_on(windows), 1e-5) << name;
  }
}

// --- metrics.jsonl -----------------------------------------------------------------

TEST(TrainCommand, MetricsRecordEveryStepAndEvalWithTheDocumentedKeys) {
  TempDir dir;
  const auto data = write_markov_tokens(dir, 3000, 256).string();
  auto r = train(dir, "m", "--nproc 2 --from-scratch --model-type llama --model-size tiny --vocab-size 256 "
                           "--seq-len 16 --batch-size 2 --max-steps 4 --warmup-steps 1 --lr 1e-3 --min-lr 1e-4 "
                           "--lr-schedule linear --eval-freq 2 --eval-max-windows 8 --data " + data +
                           " --eval-data " + data);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.run["format"], "fsdpp.metrics");
  EXPECT_EQ(r.run["version"], 1);
  EXPECT_EQ(r.run["config"]["strategy"], "full_shard");
  ASSERT_EQ(r.train.size(), 4u);
  optim::LrSchedule schedule{1e-3, 1e-4, 1, 4, optim::LrDecay::Linear};
  for (size_t i = 0; i < r.train.size(); ++i) {
    const auto& t = r.train[i];
    EXPECT_EQ(t["step"], i + 1);
    for (const char* key : {"loss", "lr", "grad_norm", "tokens_per_s", "tokens", "epoch"})
      EXPECT_TRUE(t.contains(key) && t[key].is_number()) << key;
    for (const char* key : {"data", "forward", "backward", "optimizer", "step"})
      EXPECT_GE(t["time_ms"][key].get<double>(), 0.0) << key;
    EXPECT_GT(t["memory"]["peak_rss_bytes"].get<int64_t>(), 0);
    EXPECT_GT(t["memory"]["allocated_bytes"].get<int64_t>(), 0);
    EXPECT_GE(t["memory"]["window_peak_allocated_bytes"].get<int64_t>(), t["memory"]["allocated_bytes"].get<int64_t>());
    EXPECT_GT(t["comm_bytes_sent"]["all_gather"].get<int64_t>(), 0);      // FULL_SHARD on 2 ranks
    EXPECT_GT(t["comm_bytes_sent"]["reduce_scatter"].get<int64_t>(), 0);
    EXPECT_DOUBLE_EQ(t["lr"].get<double>(), schedule.at(static_cast<int64_t>(i)));
    EXPECT_GT(t["grad_norm"].get<double>(), 0.0);
  }
  // Before training, after step 2 (--eval-freq), after the last step.
  ASSERT_EQ(r.eval.size(), 3u);
  EXPECT_EQ(r.eval[0]["step"], 0);
  EXPECT_EQ(r.eval[1]["step"], 2);
  EXPECT_EQ(r.eval[2]["step"], 4);
  EXPECT_EQ(r.eval[0]["eval_tokens"], 8 * 16);
  EXPECT_NEAR(r.eval[2]["eval_perplexity"].get<double>(), std::exp(r.eval[2]["eval_loss"].get<double>()), 1e-9);
}

TEST(TrainCommand, NumEpochsSetsTheStepsAndCkptFreqWritesLoadableSnapshots) {
  TempDir dir;
  const auto data = write_markov_tokens(dir, 1000, 256).string();  // 999 targets: 62 windows of 16
  auto r = train(dir, "e", "--nproc 2 --from-scratch --model-size tiny --vocab-size 256 --seq-len 16 --batch-size 4 "
                           "--num-epochs 1 --ckpt-freq 3 --data " + data);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.run["train_windows"], 62);
  EXPECT_EQ(r.train.size(), 8u);  // ceil(62 / (4 x 2))
  EXPECT_NEAR(r.train.back()["epoch"].get<double>(), 64.0 / 62.0, 1e-12);
  for (const char* step : {"step_0000003", "step_0000006"}) {
    auto snapshot = dir / "e" / "snapshots" / step;
    auto [code, output] = run_shell(kFsdpp + " eval --json --seq-len 16 --model " + snapshot.string() + " --data " + data);
    EXPECT_EQ(code, 0) << step << ": " << output;
  }
  EXPECT_FALSE(fs::exists(dir / "e" / "snapshots" / "step_0000008"));  // the end goes to hf/
}

TEST(TrainCommand, Bf16OffloadAndActivationCheckpointingRuns) {
  TempDir dir;
  const auto data = write_markov_tokens(dir, 3000, 32).string();
  const std::string flags = "--nproc 2 --from-scratch --model-size tiny --vocab-size 32 --seq-len 16 --batch-size 2 "
                            "--max-steps 8 --lr 1e-3 --lr-schedule constant --data " + data;
  auto fp32 = train(dir, "fp32", flags);
  auto bf16 = train(dir, "bf16", flags + " --mixed-precision bf16 --cpu-offload");
  auto ac = train(dir, "ac", flags + " --activation-checkpointing --ac-freq 2");
  ASSERT_EQ(ac.code, 0) << ac.output;
  EXPECT_EQ(ac.losses(), fp32.losses());  // recomputation changes no bit
  ASSERT_EQ(fp32.code, 0) << fp32.output;
  ASSERT_EQ(bf16.code, 0) << bf16.output;
  EXPECT_EQ(bf16.run["config"]["mixed_precision"], "bf16");
  ASSERT_EQ(bf16.losses().size(), fp32.losses().size());
  for (size_t i = 0; i < fp32.losses().size(); ++i)  // the bound of suites/fsdp/mixed_precision_test.cpp
    EXPECT_NEAR(bf16.losses()[i], fp32.losses()[i], 0.02 * fp32.losses()[i]) << "step " << i + 1;
  // The all-gather moves bf16: half of fp32's bytes.
  EXPECT_EQ(2 * bf16.train[0]["comm_bytes_sent"]["all_gather"].get<int64_t>(),
            fp32.train[0]["comm_bytes_sent"]["all_gather"].get<int64_t>());
}

TEST(TrainCommand, DeterministicRunsGiveIdenticalBits) {
  TempDir dir;
  const auto data = write_markov_tokens(dir, 3000, 256).string();
  const std::string flags = "--nproc 2 --deterministic --from-scratch --model-size tiny --vocab-size 256 --seq-len 16 "
                            "--batch-size 2 --max-steps 3 --data " + data;
  auto a = train(dir, "a", flags), b = train(dir, "b", flags);
  ASSERT_EQ(a.code, 0) << a.output;
  ASSERT_EQ(b.code, 0) << b.output;
  EXPECT_EQ(a.losses(), b.losses());
  // Rank 0 initialising and broadcasting gives the same bits as every rank making its rows.
  auto synced = train(dir, "synced", flags + " --sync-module-states");
  ASSERT_EQ(synced.code, 0) << synced.output;
  EXPECT_EQ(synced.losses(), a.losses());
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(bytes(dir / "a" / "hf" / "model.safetensors"), bytes(dir / "b" / "hf" / "model.safetensors"));
}

TEST(TrainCommand, ConfigFileGivesOptionsAndFlagsOverrideThem) {
  TempDir dir;
  const auto data = write_markov_tokens(dir, 2000, 256).string();
  std::ofstream(dir / "train.yaml") << "from_scratch: true\nmodel-size: tiny\nvocab_size: 256\nseq_len: 16\n"
                                       "batch_size: 2\nmax_steps: 5\nlr: 0.002\nno_shuffle: true\ndata: " << data << "\n";
  auto r = train(dir, "cfg", "--config " + (dir / "train.yaml").string() + " --max-steps 2");
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.train.size(), 2u);  // the flag beat the file's 5
  EXPECT_EQ(r.run["config"]["lr"], 0.002);
  EXPECT_EQ(r.run["config"]["shuffle"], false);

  std::ofstream(dir / "bad.json") << R"({"seq_len": 16, "learning_rate": 0.1})";
  auto lines = error_lines(kFsdpp + " train --config " + (dir / "bad.json").string());
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("bad.json"));
  EXPECT_THAT(lines[0], HasSubstr("learning_rate"));
}

// --- must show 4: bad input --------------------------------------------------------

TEST(TrainCommand, EachBadInputIsOneErrorLineAndANonZeroExit) {
  TempDir dir;
  const auto good = write_markov_tokens(dir, 500, 256).string();
  data::write_llmc_tokens(dir / "empty.bin", torch::empty({0}, torch::kLong));
  data::write_llmc_tokens(dir / "short.bin", torch::arange(10));
  std::ofstream(dir / "garbage.bin") << "this is not a token file";
  const std::string base = kFsdpp + " train --nproc 2 --save-dir " + dir.path().string() +
                           " --from-scratch --model-size tiny --vocab-size 256 --max-steps 2 --seq-len 16 ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {base + "--data " + (dir / "empty.bin").string(), "empty.bin"},
      {base + "--data " + (dir / "short.bin").string(), "short.bin"},
      {base + "--data " + (dir / "missing.bin").string(), "missing.bin"},
      {base + "--data " + (dir / "garbage.bin").string(), "garbage.bin"},
      {base + "--data " + good + " --batch-size 0", "--batch-size"},
      {kFsdpp + " train --from-scratch --model-size tiny --max-steps 2 --seq-len 300 --data " + good, "--seq-len 300"},
      {base + "--data " + good + " --bogus-flag 3", "--bogus-flag"},
      {base + "--data " + good + " --model " + dir.path().string(), "--from-scratch"},
      {base + "--data " + good + " --num-epochs 1", "--num-epochs"},
      {kFsdpp + " train --from-scratch --model-size tiny --vocab-size 100 --max-steps 2 --seq-len 16 --data " + good,
       "vocabulary"},
  };
  for (const auto& [command, mention] : cases) {
    auto lines = error_lines(command);
    ASSERT_EQ(lines.size(), 1u) << command << "\n" << ::testing::PrintToString(lines);
    EXPECT_THAT(lines[0], StartsWith("fsdpp: error: ")) << command;
    EXPECT_THAT(lines[0], HasSubstr(mention)) << command;
  }
}

// Without --nproc the command is the one rank of a world of one (no launcher in between
// to turn a crash into a report), and a failure must still end like bad input does: one
// line, exit status 1. It used to end in SIGABRT ("malloc_consolidate(): unaligned
// fastbin chunk detected", status 134), a SIGSEGV, or a hang at exit: a communication
// thread of an abandoned communicator was still starting up (at::init_num_threads(),
// which rebuilds LibTorch's process-wide pthreadpool) while exit() destroyed that pool.
// It is a race (about one run in three lost it here), so each failure runs ten times;
// `timeout` turns a hang into a failure.
TEST(TrainCommand, RunTimeFailureWithoutNprocIsOneLineAndExitOne) {
  TempDir dir;
  const auto data = write_markov_tokens(dir, 500, 32).string();
  fs::create_directories(dir / "taken");
  std::ofstream(dir / "taken" / "metrics.jsonl") << "{}\n";  // a run directory already used
  std::ofstream(dir / "not_a_dir") << "a file where --save-dir needs a folder\n";
  const std::string base = "timeout 60 " + kFsdpp +
                           " train --from-scratch --model-size tiny --vocab-size 32 --seq-len 16 --max-steps 2 "
                           "--data " + data + " ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      // Fails right after the world's communicator is connected, before the model is sharded.
      {base + "--save-dir " + dir.path().string() + " --experiment-name taken", "metrics.jsonl exists"},
      // Fails right after sharding, with the shard and replicate subgroups just created.
      {base + "--save-dir " + (dir / "not_a_dir").string() + " --experiment-name x", "not_a_dir"},
  };
  for (const auto& [command, mention] : cases) {
    for (int attempt = 1; attempt <= 10; ++attempt) {
      auto [code, lines] = status_and_error_lines(command);
      ASSERT_EQ(code, 1) << "attempt " << attempt << ": " << command << "\n" << ::testing::PrintToString(lines);
      ASSERT_EQ(lines.size(), 1u) << "attempt " << attempt << ": " << command << "\n"
                                  << ::testing::PrintToString(lines);
      EXPECT_THAT(lines[0], StartsWith("fsdpp: error: ")) << command;
      EXPECT_THAT(lines[0], HasSubstr(mention)) << command;
    }
  }
}

}  // namespace
}  // namespace fsdpp
