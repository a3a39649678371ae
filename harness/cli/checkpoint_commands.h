// `fsdpp checkpoint export` (a sharded checkpoint -> a Hugging Face folder) and
// `fsdpp checkpoint inspect` (what a checkpoint holds, with its checksum status).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

namespace fsdpp::cli {

class CheckpointCommands {
 public:
  void add_to(CLI::App& app);
  // The exit code of a `checkpoint` subcommand if one was parsed, or -1.
  int run_parsed();

 private:
  CLI::App* export_ = nullptr;
  CLI::App* inspect_ = nullptr;
  std::string checkpoint_, out_;
  uint64_t max_shard_bytes_ = 0;
  bool json_ = false;
};

}  // namespace fsdpp::cli
