// `fsdpp train`: flags (and a JSON/YAML --config file with the same option names) into a
// TrainConfig, then train::train on every rank, local (--nproc) or under torchrun/srun.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/train/train_config.h"
#include "harness/cli/command.h"
#include "harness/cli/distributed.h"

namespace fsdpp::cli {

// --no-reshard-after-forward's value: "0,2,-1" are unit indices in module order (negative
// from the end), "" none. Throws std::invalid_argument naming `flag` for anything else.
std::vector<int64_t> parse_unit_indices(const std::string& spec, const std::string& flag);

class TrainCommand final : public Command {
 public:
  void add_to(CLI::App& app) override;

  // If argv is a `train` command with --config FILE: the same argv with the file's options
  // inserted right after "train" (keys are option names without "--", '_' or '-'; values
  // strings, numbers, or booleans for switches), so flags given on the command line,
  // which come later, override them. Throws std::invalid_argument naming the file and
  // the key for unknown options or unusable values.
  std::vector<std::string> expand_config(const std::vector<std::string>& argv) const override;

  // The TrainConfig the parsed flags describe: the string flags (strategy, LR schedule,
  // prefetch, unit indices) turned into their types; throws std::invalid_argument naming a bad value.
  // Not yet validated (TrainConfig::validate) or checked against model and data
  // (train::preflight): run does both before it launches a rank.
  const train::TrainConfig& finish_config();

  // Command (command.h): parsed() if `train` was.
  bool parsed() const override;
  // finish_config() and TrainConfig::validate(); under FSDPP_PARSE_ONLY=1 with a --config
  // file that does not exist (a placeholder in the docs), finish_config() only.
  void check() override;
  int run(const std::vector<std::string>& argv) override;

 private:
  CLI::App* command_ = nullptr;
  CLI::Option* device_option_ = nullptr;         // unset: the machine's accelerator, else the CPU
  CLI::Option* divide_factor_option_ = nullptr;  // unset: gradients averaged
  train::TrainConfig config_;
  DistributedFlags dist_;
  std::string config_file_, strategy_ = "full_shard", lr_schedule_ = "cosine", backward_prefetch_ = "pre";
  std::string no_reshard_after_forward_;  // comma-separated unit indices
  double divide_factor_ = 0;
  bool no_shuffle_ = false, no_forward_prefetch_ = false;
};

}  // namespace fsdpp::cli
