// What a checkpoint costs the training loop, synchronous vs asynchronous save
// (core/checkpoint/async_saver.h). Trains the CPU benchmark model (4 layers, d=256, vocab
// 8192, seq 128, batch 8 per rank, fp32, FULL_SHARD on 2 ranks x 1 thread) and saves the
// sharded model and AdamW state (about 32 MB per rank) every --every steps, in three runs
// of the same steps: no saves, synchronous saves, asynchronous saves. Reports per run the
// median step time, the wall time of all steps, and per save the time the loop was held
// (sync: the whole save; async: the host copy plus any wait for the previous save) and,
// for async, the time until the background save committed. Ratios are within one run of
// this binary, on one machine.
//
//   checkpoint_save_bench [--steps N] [--every K] [--json FILE]
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/checkpoint/async_saver.h"
#include "core/checkpoint/fsdp_state.h"
#include "core/fsdp/sharded_model.h"
#include "core/io/atomic_file.h"
#include "core/io/file_tree.h"
#include "core/models/tiny_transformer.h"
#include "core/nn/module_hooks.h"
#include "core/runtime/stopwatch.h"
#include "harness/launch/run_ranks.h"
#include "harness/results/stats.h"

using namespace fsdpp;

namespace {

using Clock = runtime::SteadyClock;
using runtime::ms_since;

// The median, 0 for none (a run without saves has no held or commit times).
double median_or_zero(const std::vector<double>& v) { return v.empty() ? 0 : results::median(v); }

enum class Mode { None, Sync, Async };
const char* name(Mode m) { return m == Mode::None ? "none" : m == Mode::Sync ? "sync" : "async"; }

// One run on this rank; rank 0 writes its numbers as JSON to `out`.
void measure(harness::RankContext& ctx, Mode mode, int steps, int every, const std::filesystem::path& dir,
             const std::filesystem::path& out) {
  models::TinyTransformerConfig config{8192, 128, 256, 4, 4};
  torch::manual_seed(0);
  auto model = models::TinyTransformer(config);
  auto sharded = fsdp::ShardedModel::create(model.ptr(), ctx.comm, fsdp::FsdpOptions{},
                                            fsdp::wrap_by_module_type({"fsdpp::models::TinyBlockImpl"}));
  torch::optim::AdamW opt(sharded->parameters(), torch::optim::AdamWOptions(1e-4));
  auto tokens = torch::randint(0, config.vocab, {8, config.seq_len + 1});
  auto input = tokens.narrow(1, 0, config.seq_len), target = tokens.narrow(1, 1, config.seq_len);
  std::unique_ptr<checkpoint::AsyncCheckpointSaver> saver;
  if (mode == Mode::Async) saver = std::make_unique<checkpoint::AsyncCheckpointSaver>(ctx.comm);
  checkpoint::SaveOptions options;
  options.keep_last = 1;
  std::vector<double> step_ms, held_ms, commit_ms;
  double content_bytes = 0;
  ctx.comm.barrier();
  const auto start = Clock::now();
  for (int step = -1; step < steps; ++step) {  // step -1 warms up, saves nothing
    const auto t0 = Clock::now();
    opt.zero_grad();
    models::lm_loss(nn::call(model, input), target).backward();
    opt.step();
    if (step >= 0 && mode != Mode::None && (step + 1) % every == 0) {
      const auto t = Clock::now();
      auto content = checkpoint::sharded_state(*sharded, &opt);
      content_bytes = 0;
      for (const auto& x : content.tensors) content_bytes += x.rows.numel() * x.rows.element_size();
      const auto path = dir / ("step-" + std::to_string(1000000 + step + 1).substr(1));
      if (mode == Mode::Sync) {
        checkpoint::save_checkpoint(ctx.comm, path, content, {{"step", step + 1}}, options);
      } else {
        if (auto done = saver->wait()) commit_ms.push_back(done->total_ms);
        saver->save(path, content, {{"step", step + 1}}, options);
      }
      held_ms.push_back(ms_since(t));
    }
    if (step >= 0) step_ms.push_back(ms_since(t0));
  }
  if (saver)
    if (auto done = saver->wait()) commit_ms.push_back(done->total_ms);
  const double total_ms = ms_since(start);
  if (ctx.rank == 0)
    io::write_file_atomic(out, nlohmann::json{{"mode", name(mode)},
                                              {"median_step_ms", median_or_zero(step_ms)},
                                              {"steps_wall_ms", total_ms},
                                              {"saves", held_ms.size()},
                                              {"median_held_ms", median_or_zero(held_ms)},
                                              {"median_commit_ms", median_or_zero(commit_ms)},
                                              {"bytes_per_rank", content_bytes}}
                                   .dump());
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 8, every = 2;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--every") && i + 1 < argc) {
      every = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--every K] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 1 || every < 1 || every > steps) {
    std::fprintf(stderr, "--steps must be >= 1 and --every in [1, steps]\n");
    return 2;
  }
  const auto work = std::filesystem::temp_directory_path() / ("fsdpp-ckpt-bench-" + std::to_string(::getpid()));
  std::vector<nlohmann::json> rows;
  for (Mode mode : {Mode::None, Mode::Sync, Mode::Async}) {
    std::filesystem::create_directories(work);
    harness::RunOptions options;
    options.launch.echo_output = false;
    options.launch.budget = std::chrono::minutes(10);
    auto report = harness::run_ranks(
        2, [&](harness::RankContext& ctx) { measure(ctx, mode, steps, every, work / "ckpt", work / "row.json"); },
        options);
    if (!report.ok()) {
      std::fprintf(stderr, "%s\n", report.summary().c_str());
      io::remove_tree(work);
      return 1;
    }
    std::ifstream in(work / "row.json");
    rows.push_back(nlohmann::json::parse(in));
    io::remove_tree(work);
  }
  const double none_wall = rows[0]["steps_wall_ms"].get<double>();
  std::printf(
      "FULL_SHARD, 2 ranks x 1 thread, 4 layers d=256 vocab 8192 seq 128 batch 8/rank, fp32: %d steps, "
      "a save every %d (%.1f MB per rank)\n",
      steps, every, rows[1]["bytes_per_rank"].get<double>() / 1e6);
  std::printf("%-6s %14s %14s %16s %16s %14s\n", "saves", "median_step_ms", "steps_wall_ms", "vs_no_saves",
              "held_per_save_ms", "commit_ms");
  for (auto& r : rows) {
    r["wall_vs_no_saves"] = r["steps_wall_ms"].get<double>() / none_wall;
    std::printf("%-6s %14.1f %14.1f %15.3fx %16.1f %14.1f\n", r["mode"].get<std::string>().c_str(),
                r["median_step_ms"].get<double>(), r["steps_wall_ms"].get<double>(),
                r["wall_vs_no_saves"].get<double>(), r["median_held_ms"].get<double>(),
                r["median_commit_ms"].get<double>());
  }
  const double ratio = rows[2]["median_held_ms"].get<double>() / rows[1]["median_held_ms"].get<double>();
  std::printf("async holds the loop %.3fx as long per save as sync\n", ratio);
  if (!json_path.empty())
    io::write_file_atomic(json_path, nlohmann::json{{"format", "fsdpp.checkpoint-save-bench"},
                                                    {"version", 1},
                                                    {"steps", steps},
                                                    {"every", every},
                                                    {"async_over_sync_held", ratio},
                                                    {"rows", rows}}
                                             .dump(2) +
                                         "\n");
  return 0;
}
