// fsdpp: the one command-line entry point. Each subcommand parses its flags here and
// hands off to the library; errors become one line on stderr and a non-zero exit.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "core/io/atomic_file.h"
#include "core/fsdp/sharding.h"
#include "core/runtime/device.h"
#include "harness/cli/bench_command.h"
#include "harness/cli/build_info.h"
#include "harness/cli/checkpoint_commands.h"
#include "harness/cli/data_commands.h"
#include "harness/cli/distributed.h"
#include "harness/cli/model_commands.h"
#include "harness/cli/results_commands.h"
#include "harness/cli/train_command.h"
#include "harness/cli/usage_error.h"
#include "harness/equiv/equivalence.h"
#include "harness/launch/run_ranks.h"
#include "harness/selfcheck/selfcheck.h"

namespace {

struct SelfcheckFlags {
  fsdpp::cli::DistributedFlags dist;
  int64_t numel = (1 << 20) + 3;
  int iterations = 5;
  std::string json_path;
};

int selfcheck_rank(const SelfcheckFlags& flags, fsdpp::comm::Communicator& comm) {
  fsdpp::harness::SelfcheckOptions options;
  options.numel = flags.numel;
  options.iterations = flags.iterations;
  auto result = fsdpp::harness::run_selfcheck(comm, options);
  if (comm.rank() == 0) {
    std::fputs(fsdpp::harness::format_table(result).c_str(), stdout);
    std::fflush(stdout);
    if (!flags.json_path.empty())
      fsdpp::io::write_file_atomic(flags.json_path, fsdpp::harness::to_json(result).dump(2) + "\n");
  }
  return result.all_correct() ? 0 : 2;
}

struct EquivFlags {
  fsdpp::cli::DistributedFlags dist;
  std::string model = "tiny_transformer";
  std::string strategy = "full_shard";
  int steps = 10;
  bool deterministic = false;
  bool no_prefetch = false;
  std::string backward_prefetch = "pre";
  int max_inflight = 2;
  int grad_accum = 1;
  bool no_sync_accum = false;
  double clip = 0;
  double norm_type = 2;
  double adam_eps = 1e-6;
  double lr = 1e-3;
  uint64_t seed = 1;
  int hybrid_shard_size = 0;
  std::string mixed_precision = "fp32", reduce_dtype;
  bool cpu_offload = false;
  std::string json_path;
};

at::ScalarType dtype_named(const std::string& name) {
  return fsdpp::runtime::parse_compute_dtype(name, "--mixed-precision/--reduce-dtype");
}

int equiv_rank(const EquivFlags& flags, fsdpp::comm::Communicator& comm) {
  fsdpp::harness::EquivConfig config;
  config.fsdp.strategy = fsdpp::fsdp::parse_strategy(flags.strategy);
  config.fsdp.forward_prefetch = !flags.no_prefetch;
  config.fsdp.backward_prefetch = flags.no_prefetch || flags.backward_prefetch == "none"
                                      ? fsdpp::fsdp::BackwardPrefetch::None
                                  : flags.backward_prefetch == "post" ? fsdpp::fsdp::BackwardPrefetch::Post
                                                                      : fsdpp::fsdp::BackwardPrefetch::Pre;
  config.fsdp.max_inflight_all_gathers = flags.max_inflight;
  config.fsdp.hybrid_shard_size = flags.hybrid_shard_size;
  if (flags.mixed_precision != "fp32") config.fsdp.mixed_precision.param_dtype = dtype_named(flags.mixed_precision);
  if (!flags.reduce_dtype.empty()) config.fsdp.mixed_precision.reduce_dtype = dtype_named(flags.reduce_dtype);
  config.fsdp.cpu_offload = flags.cpu_offload;
  config.steps = flags.steps;
  config.deterministic = flags.deterministic;
  config.grad_accum = flags.grad_accum;
  config.accumulate_without_sync = flags.no_sync_accum;
  config.clip_max_norm = flags.clip;
  config.norm_type = flags.norm_type;
  config.adam_eps = flags.adam_eps;
  config.lr = flags.lr;
  config.seed = flags.seed;
  auto report = fsdpp::harness::run_equivalence(comm, fsdpp::harness::equiv_case(flags.model), config);
  if (comm.rank() != 0) return 0;
  std::fputs(report.table().c_str(), stdout);
  std::fflush(stdout);
  if (!flags.json_path.empty()) fsdpp::io::write_file_atomic(flags.json_path, report.to_json().dump(2) + "\n");
  return report.ok() ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  // A vanished peer must be an error on its socket (EPIPE -> CommError), not SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"fsdpp: fully sharded data parallel training core and its test harness"};
  app.require_subcommand(1);
  app.set_version_flag("--version", fsdpp::cli::build_info(), "Print fsdpp's version and commit and the LibTorch, CUDA and NCCL it was built with");
  std::vector<std::string> args(argv, argv + argc);

  SelfcheckFlags selfcheck;
  auto* sc = app.add_subcommand("selfcheck", "Run every collective on N ranks; check and time each");
  fsdpp::cli::add_distributed_flags(*sc, selfcheck.dist);
  sc->add_option("--numel", selfcheck.numel, "Elements per rank per collective")->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
  sc->add_option("--iterations", selfcheck.iterations, "Timed repetitions per collective")->check(CLI::Range(1, 1000));
  sc->add_option("--json", selfcheck.json_path, "Also write the results as JSON (format fsdpp.selfcheck v1)");

  EquivFlags equiv;
  auto* eq = app.add_subcommand("equiv", "Train sharded on N ranks and unsharded in one process; compare every step");
  fsdpp::cli::add_distributed_flags(*eq, equiv.dist);
  eq->add_option("--model", equiv.model, "Built-in model")->check(CLI::IsMember({"tiny_transformer", "toy_mlp"}));
  eq->add_option("--strategy", equiv.strategy, "full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2")
      ->transform([](std::string s) { return fsdpp::fsdp::to_string(fsdpp::fsdp::parse_strategy(s)); });
  eq->add_option("--steps", equiv.steps, "AdamW steps")->check(CLI::Range(1, 100000));
  eq->add_flag("--deterministic", equiv.deterministic, "Compare parameters bit for bit against N rank-ordered micro-batches");
  eq->add_flag("--no-prefetch", equiv.no_prefetch, "Disable forward and backward prefetching");
  eq->add_option("--backward-prefetch", equiv.backward_prefetch, "pre (BACKWARD_PRE), post (BACKWARD_POST) or none")
      ->check(CLI::IsMember({"pre", "post", "none"}));
  eq->add_option("--max-inflight-all-gathers", equiv.max_inflight, "Limit on prefetched all-gathers in flight")
      ->check(CLI::Range(1, 64));
  eq->add_option("--grad-accum-steps", equiv.grad_accum, "Micro-steps per optimizer step")->check(CLI::Range(1, 1000));
  eq->add_flag("--no-sync-accum", equiv.no_sync_accum, "Accumulate unsharded gradients without communication until the last micro-step");
  eq->add_option("--grad-clip", equiv.clip, "Clip the gradient norm to this (0: off)")->check(CLI::Range(0.0, 1e30));
  eq->add_option("--norm-type", equiv.norm_type, "Norm for clipping: p > 0, or inf")
      ->check([](const std::string& s) { return s == "inf" || std::stod(s) > 0 ? std::string() : std::string("must be > 0 or inf"); });
  eq->add_option("--adam-eps", equiv.adam_eps, "AdamW epsilon")->check(CLI::PositiveNumber);
  eq->add_option("--lr", equiv.lr, "AdamW learning rate")->check(CLI::PositiveNumber);
  eq->add_option("--seed", equiv.seed, "Seed of the initial weights");
  eq->add_option("--hybrid-shard-size", equiv.hybrid_shard_size, "Ranks per shard group for hybrid strategies")
      ->check(CLI::Range(1, 1024));
  eq->add_option("--mixed-precision", equiv.mixed_precision, "param_dtype: fp32, bf16 or fp16 (fp32 masters either way)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  eq->add_option("--reduce-dtype", equiv.reduce_dtype, "Gradient reduction dtype (default: the param dtype)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  eq->add_flag("--cpu-offload", equiv.cpu_offload, "Keep shards, gradients and optimizer state in host memory");
  eq->add_option("--json", equiv.json_path, "Also write the report as JSON (format fsdpp.equiv v1)");

  fsdpp::cli::ModelCommands model_commands;
  model_commands.add_to(app);
  fsdpp::cli::DataCommands data_commands;
  data_commands.add_to(app);
  fsdpp::cli::TrainCommand train_command;
  train_command.add_to(app);
  fsdpp::cli::BenchCommand bench_command;
  bench_command.add_to(app);
  fsdpp::cli::CheckpointCommands checkpoint_commands;
  checkpoint_commands.add_to(app);
  fsdpp::cli::ResultsCommands results_commands;
  results_commands.add_to(app);

  try {
    args = train_command.expand_config(args);
    std::vector<char*> arg_ptrs;
    for (auto& a : args) arg_ptrs.push_back(a.data());
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // Bad usage exits 2 (README, exit codes), whatever CLI11's own code for the error is.
    std::fprintf(stderr, "fsdpp: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdpp: error: %s\n", e.what());
    return 2;
  }
  try {
    if (sc->parsed())
      return fsdpp::cli::run_distributed(args, selfcheck.dist, [&](fsdpp::comm::Communicator& comm, const auto&) {
        return selfcheck_rank(selfcheck, comm);
      });
    if (int code = model_commands.run_parsed(); code >= 0) return code;
    if (int code = data_commands.run_parsed(); code >= 0) return code;
    if (int code = train_command.run_parsed(args); code >= 0) return code;
    if (int code = bench_command.run_parsed(args); code >= 0) return code;
    if (int code = checkpoint_commands.run_parsed(); code >= 0) return code;
    if (int code = results_commands.run_parsed(); code >= 0) return code;
    if (eq->parsed())
      return fsdpp::cli::run_distributed(args, equiv.dist, [&](fsdpp::comm::Communicator& comm, const auto&) {
        return equiv_rank(equiv, comm);
      });
  } catch (const fsdpp::cli::UsageError& e) {
    std::fprintf(stderr, "fsdpp: error: %s\n", e.what());
    return fsdpp::cli::kExitBadUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdpp: error: %s\n", fsdpp::harness::exception_message(e).c_str());
    return fsdpp::cli::kExitFailedRun;
  }
  return 0;
}
