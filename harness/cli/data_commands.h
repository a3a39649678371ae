// `fsdpp data prepare`: text, JSON, JSONL and YAML files -> fsdpp token shards.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "core/data/prepare.h"
#include "harness/cli/command.h"

namespace fsdpp::cli {

class DataCommands final : public Command {
 public:
  // Command (command.h): parsed() if `data prepare` was.
  void add_to(CLI::App& app) override;
  bool parsed() const override;
  void check() override;
  int run(const std::vector<std::string>& argv) override;

 private:
  CLI::App* data_ = nullptr;
  CLI::App* prepare_ = nullptr;
  data::PrepareOptions options_;
  int64_t end_idx_ = -1;
};

}  // namespace fsdpp::cli
