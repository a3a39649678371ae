// `fsdpp train`: flags (and a JSON/YAML --config file with the same option names) into a
// TrainConfig, then train::train on every rank, local (--nproc) or under torchrun/srun.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/train/train_config.h"
#include "core/train/train_options.h"
#include "harness/cli/command.h"
#include "harness/cli/distributed.h"

namespace fsdpp::cli {

using train::parse_unit_indices;  // core/train/train_options.h

class TrainCommand final : public Command {
 public:
  void add_to(CLI::App& app) override;

  // If argv is a `train` command with --config FILE: the same argv with the file's options
  // inserted right after "train" (keys are option names without "--", '_' or '-'; values
  // strings, numbers, or booleans for switches), so flags given on the command line,
  // which come later, override them. Throws std::invalid_argument naming the file and
  // the key for unknown options or unusable values.
  std::vector<std::string> expand_config(const std::vector<std::string>& argv) const override;

  // The TrainConfig the parsed flags describe: TrainConfig's defaults, then each option
  // given read by its entry (core/train/train_options.h); throws std::invalid_argument
  // naming a bad value.
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
  // Whether the option named `name` ("--device") was given (on the line or in --config).
  bool given(const std::string& name) const;

  // Each option of train_options(), as CLI11 parsed it.
  struct Given {
    const train::TrainOption* option;
    CLI::Option* cli;
    std::string text;  // a value's text
    bool on;           // a switch
  };
  CLI::App* command_ = nullptr;
  std::vector<Given> given_;  // reserved before CLI11 holds pointers into it
  train::TrainConfig config_;
  DistributedFlags dist_;
  std::string config_file_;
};

}  // namespace fsdpp::cli
