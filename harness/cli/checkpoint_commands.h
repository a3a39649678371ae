// `fsdpp checkpoint export` (a sharded checkpoint -> a Hugging Face folder) and
// `fsdpp checkpoint inspect` (what a checkpoint holds, with its checksum status).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "harness/cli/command.h"

namespace fsdpp::cli {

class CheckpointCommands final : public Command {
 public:
  // Command (command.h): parsed() if a `checkpoint` subcommand was.
  void add_to(CLI::App& app) override;
  bool parsed() const override;
  int run(const std::vector<std::string>& argv) override;

 private:
  CLI::App* export_ = nullptr;
  CLI::App* inspect_ = nullptr;
  std::string checkpoint_, out_;
  uint64_t max_shard_bytes_ = 0;
  bool json_ = false;
};

}  // namespace fsdpp::cli
