// Does communication overlap with compute on Gloo? Trains a GPT-2-sized-for-CPU model
// (4 layers, d=256, vocab 8192, seq 128, batch 8 per rank, fp32) with FULL_SHARD on 2
// ranks, with and without prefetching, and reports per step: time, all-gather and
// reduce-scatter time on the communication thread (busy) and the part the training
// thread waited for (exposed). Overlap = 1 - exposed / busy.
//
//   fsdp_overlap_bench [--steps N] [--json FILE]
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/fsdp/sharded_model.h"
#include "core/io/atomic_file.h"
#include "core/models/tiny_transformer.h"
#include "core/nn/module_hooks.h"
#include "harness/launch/run_ranks.h"

using namespace fsdpp;

namespace {

struct Result {
  bool prefetch = false;
  double step_ms = 0, ag_busy_ms = 0, ag_exposed_ms = 0, rs_busy_ms = 0, rs_exposed_ms = 0;
};

void measure(harness::RankContext& ctx, bool prefetch, int steps, const std::string& out_path) {
  models::TinyTransformerConfig config{8192, 128, 256, 4, 4};
  torch::manual_seed(0);
  auto model = models::TinyTransformer(config);
  fsdp::FsdpOptions options;
  options.forward_prefetch = prefetch;
  options.backward_prefetch = prefetch ? fsdp::BackwardPrefetch::Pre : fsdp::BackwardPrefetch::None;
  auto sharded = fsdp::ShardedModel::create(model.ptr(), ctx.comm, options,
                                            fsdp::wrap_by_module_type({"fsdpp::models::TinyBlockImpl"}));
  torch::optim::AdamW opt(sharded->parameters(), torch::optim::AdamWOptions(1e-4));
  auto tokens = torch::randint(0, config.vocab, {8, config.seq_len + 1});
  auto input = tokens.narrow(1, 0, config.seq_len), target = tokens.narrow(1, 1, config.seq_len);
  double total_ms = 0;
  for (int step = -1; step < steps; ++step) {  // step -1 warms up
    if (step == 0) sharded->reset_comm_stats();
    ctx.comm.barrier();
    auto t0 = std::chrono::steady_clock::now();
    opt.zero_grad();
    models::lm_loss(nn::call(model, input), target).backward();
    opt.step();
    if (step >= 0) total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  auto ag = sharded->comm_stats(comm::CollectiveKind::AllGather);
  auto rs = sharded->comm_stats(comm::CollectiveKind::ReduceScatter);
  auto numbers = torch::tensor(
      {total_ms / steps, ag.busy_ms / steps, ag.blocked_ms / steps, rs.busy_ms / steps, rs.blocked_ms / steps},
      torch::kDouble);
  ctx.comm.all_reduce(numbers, comm::ReduceOp::Max);  // the slowest rank is the step
  if (ctx.rank == 0) {
    std::ofstream(out_path) << numbers[0].item<double>() << " " << numbers[1].item<double>() << " "
                            << numbers[2].item<double>() << " " << numbers[3].item<double>() << " "
                            << numbers[4].item<double>() << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 5;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--steps") && i + 1 < argc) {
      steps = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--json") && i + 1 < argc) {
      json_path = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--steps N] [--json FILE]\n", argv[0]);
      return 2;
    }
  }
  if (steps < 1) {
    std::fprintf(stderr, "--steps must be >= 1\n");
    return 2;
  }
  std::vector<Result> results;
  for (bool prefetch : {false, true}) {
    auto out = std::filesystem::temp_directory_path() / ("fsdpp-overlap-" + std::to_string(::getpid()));
    harness::RunOptions options;
    options.launch.echo_output = false;
    options.launch.budget = std::chrono::minutes(10);
    auto report = harness::run_ranks(
        2, [&](harness::RankContext& ctx) { measure(ctx, prefetch, steps, out); }, options);
    if (!report.ok()) {
      std::fprintf(stderr, "%s\n", report.summary().c_str());
      return 1;
    }
    Result r;
    r.prefetch = prefetch;
    std::ifstream(out) >> r.step_ms >> r.ag_busy_ms >> r.ag_exposed_ms >> r.rs_busy_ms >> r.rs_exposed_ms;
    std::filesystem::remove(out);
    results.push_back(r);
  }
  std::printf("FULL_SHARD, 2 ranks x 1 thread, 4 layers d=256 vocab 8192 seq 128 batch 8/rank, fp32, %d steps\n",
              steps);
  std::printf("%-9s %9s %12s %14s %10s %12s %14s %10s\n", "prefetch", "step_ms", "ag_busy_ms", "ag_exposed_ms",
              "ag_overlap", "rs_busy_ms", "rs_exposed_ms", "rs_overlap");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& r : results) {
    double ag_overlap = r.ag_busy_ms > 0 ? 1 - r.ag_exposed_ms / r.ag_busy_ms : 0;
    double rs_overlap = r.rs_busy_ms > 0 ? 1 - r.rs_exposed_ms / r.rs_busy_ms : 0;
    std::printf("%-9s %9.1f %12.1f %14.1f %9.0f%% %12.1f %14.1f %9.0f%%\n", r.prefetch ? "on" : "off", r.step_ms,
                r.ag_busy_ms, r.ag_exposed_ms, 100 * ag_overlap, r.rs_busy_ms, r.rs_exposed_ms, 100 * rs_overlap);
    rows.push_back({{"prefetch", r.prefetch},
                    {"step_ms", r.step_ms},
                    {"all_gather_busy_ms", r.ag_busy_ms},
                    {"all_gather_exposed_ms", r.ag_exposed_ms},
                    {"reduce_scatter_busy_ms", r.rs_busy_ms},
                    {"reduce_scatter_exposed_ms", r.rs_exposed_ms}});
  }
  if (!json_path.empty())
    io::write_file_atomic(
        json_path,
        nlohmann::json{{"format", "fsdpp.overlap"}, {"version", 1}, {"steps", steps}, {"rows", rows}}.dump(2) + "\n");
  return 0;
}
