#include "harness/cli/equiv_command.h"

#include <cstdio>

#include "core/fsdp/sharding.h"
#include "core/io/atomic_file.h"
#include "core/runtime/device.h"
#include "harness/equiv/equivalence.h"

namespace fsdpp::cli {

namespace {

at::ScalarType equiv_dtype_named(const std::string& name) {
  return runtime::parse_compute_dtype(name, "--mixed-precision/--reduce-dtype");
}

}  // namespace

void EquivCommand::add_to(CLI::App& app) {
  auto* eq = command_ =
      app.add_subcommand("equiv", "Train sharded on N ranks and unsharded in one process; compare every step");
  add_distributed_flags(*eq, dist_);
  eq->add_option("--model", model_, "Built-in model")->check(CLI::IsMember({"tiny_transformer", "toy_mlp"}));
  eq->add_option("--strategy", strategy_, "full_shard, shard_grad_op, no_shard, hybrid_shard, hybrid_shard_zero2")
      ->transform([](std::string s) { return fsdp::to_string(fsdp::parse_strategy(s)); });
  eq->add_option("--steps", steps_, "AdamW steps")->check(CLI::Range(1, 100000));
  eq->add_flag("--deterministic", deterministic_,
               "Compare parameters bit for bit against N rank-ordered micro-batches");
  eq->add_flag("--no-prefetch", no_prefetch_, "Disable forward and backward prefetching");
  eq->add_option("--backward-prefetch", backward_prefetch_, "pre (BACKWARD_PRE), post (BACKWARD_POST) or none")
      ->check(CLI::IsMember({"pre", "post", "none"}));
  eq->add_option("--max-inflight-all-gathers", max_inflight_, "Limit on prefetched all-gathers in flight")
      ->check(CLI::Range(1, 64));
  eq->add_option("--grad-accum-steps", grad_accum_, "Micro-steps per optimizer step")->check(CLI::Range(1, 1000));
  eq->add_flag("--no-sync-accum", no_sync_accum_,
               "Accumulate unsharded gradients without communication until the last micro-step");
  eq->add_option("--grad-clip", clip_, "Clip the gradient norm to this (0: off)")->check(CLI::Range(0.0, 1e30));
  eq->add_option("--norm-type", norm_type_, "Norm for clipping: p > 0, or inf")->check([](const std::string& s) {
    return s == "inf" || std::stod(s) > 0 ? std::string() : std::string("must be > 0 or inf");
  });
  eq->add_option("--adam-eps", adam_eps_, "AdamW epsilon")->check(CLI::PositiveNumber);
  eq->add_option("--lr", lr_, "AdamW learning rate")->check(CLI::PositiveNumber);
  eq->add_option("--seed", seed_, "Seed of the initial weights");
  eq->add_option("--hybrid-shard-size", hybrid_shard_size_, "Ranks per shard group for hybrid strategies")
      ->check(CLI::Range(1, 1024));
  eq->add_option("--mixed-precision", mixed_precision_, "param_dtype: fp32, bf16 or fp16 (fp32 masters either way)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  eq->add_option("--reduce-dtype", reduce_dtype_, "Gradient reduction dtype (default: the param dtype)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  eq->add_flag("--cpu-offload", cpu_offload_, "Keep shards, gradients and optimizer state in host memory");
  eq->add_option("--json", json_path_, "Also write the report as JSON (format fsdpp.equiv v1)");
}

bool EquivCommand::parsed() const { return command_ != nullptr && command_->parsed(); }

int EquivCommand::run(const std::vector<std::string>& argv) {
  return run_distributed(argv, dist_, [&](comm::Communicator& comm, const auto&) { return run_rank(comm); });
}

int EquivCommand::run_rank(comm::Communicator& comm) const {
  harness::EquivConfig config;
  config.fsdp.strategy = fsdp::parse_strategy(strategy_);
  config.fsdp.forward_prefetch = !no_prefetch_;
  config.fsdp.backward_prefetch = no_prefetch_ || backward_prefetch_ == "none" ? fsdp::BackwardPrefetch::None
                                  : backward_prefetch_ == "post"               ? fsdp::BackwardPrefetch::Post
                                                                               : fsdp::BackwardPrefetch::Pre;
  config.fsdp.max_inflight_all_gathers = max_inflight_;
  config.fsdp.hybrid_shard_size = hybrid_shard_size_;
  if (mixed_precision_ != "fp32") config.fsdp.mixed_precision.param_dtype = equiv_dtype_named(mixed_precision_);
  if (!reduce_dtype_.empty()) config.fsdp.mixed_precision.reduce_dtype = equiv_dtype_named(reduce_dtype_);
  config.fsdp.cpu_offload = cpu_offload_;
  config.steps = steps_;
  config.deterministic = deterministic_;
  config.grad_accum = grad_accum_;
  config.accumulate_without_sync = no_sync_accum_;
  config.clip_max_norm = clip_;
  config.norm_type = norm_type_;
  config.adam_eps = adam_eps_;
  config.lr = lr_;
  config.seed = seed_;
  auto report = harness::run_equivalence(comm, harness::equiv_case(model_), config);
  if (comm.rank() != 0) return 0;
  std::fputs(report.table().c_str(), stdout);
  std::fflush(stdout);
  if (!json_path_.empty()) io::write_file_atomic(json_path_, report.to_json().dump(2) + "\n");
  return report.ok() ? 0 : 2;
}

}  // namespace fsdpp::cli
