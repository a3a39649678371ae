// `fsdpp data prepare`: text, JSON, JSONL and YAML files -> fsdpp token shards.
#pragma once

#include <CLI/CLI.hpp>

#include "core/data/prepare.h"

namespace fsdpp::cli {

class DataCommands {
 public:
  void add_to(CLI::App& app);
  // The exit code of `data prepare` if it was parsed, or -1.
  int run_parsed();

 private:
  CLI::App* data_ = nullptr;
  CLI::App* prepare_ = nullptr;
  data::PrepareOptions options_;
  int64_t end_idx_ = -1;
};

}  // namespace fsdpp::cli
