// `fsdpp plan`: does a training configuration fit, and how fast will it be? Prints per
// rank the persistent bytes (parameter and gradient shards, optimizer state, fp32
// masters), the transient bytes (unsharded units in flight, activations with and without
// checkpointing, logits, all-gather and reduce-scatter buffers), the predicted peak, the
// bytes each collective sends per step and the predicted step time with its assumptions
// (core/plan/). --json FILE writes the fsdpp.plan document (core/plan/PLAN.md). --fit
// searches strategy x checkpointing x offload x micro-batch for the fastest configuration
// that fits --gpu-memory and prints its `fsdpp train` flags and why each other lost.
// Bad input (unknown model size, a mesh the world does not divide, an impossible or
// unparsable memory) is one line naming the flag, exit 2.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "harness/cli/command.h"

namespace fsdpp::cli {

class PlanCommand final : public Command {
 public:
  void add_to(CLI::App& app) override;
  bool parsed() const override;
  void check() override;
  int run(const std::vector<std::string>& argv) override;

 private:
  CLI::App* command_ = nullptr;
  std::string model_type_, model_size_, model_dir_;
  int64_t vocab_size_ = 0;
  std::string strategy_ = "full_shard";
  int nproc_ = 1, nodes_ = 1, hybrid_shard_size_ = 0, ac_freq_ = 1;
  std::string mixed_precision_ = "fp32";
  bool activation_checkpointing_ = false, cpu_offload_ = false, no_prefetch_ = false, fit_ = false;
  int64_t batch_size_ = 1, seq_len_ = 0, grad_accum_steps_ = 1;
  std::string gpu_memory_, host_memory_, link_bandwidth_, json_out_;
  std::string no_reshard_after_forward_;  // comma-separated unit indices, as fsdpp train's
  int reshard_after_forward_group_size_ = 0;
};

}  // namespace fsdpp::cli
