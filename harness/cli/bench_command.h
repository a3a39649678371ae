// `fsdpp bench-step`: one benchmark cell (harness/bench/step_bench.h) on N local ranks
// (--nproc) or under torchrun/srun; rank 0 prints a summary line and writes the cell's
// JSON (--out).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "harness/bench/step_bench.h"
#include "harness/cli/distributed.h"

namespace fsdpp::cli {

class BenchCommand {
 public:
  void add_to(CLI::App& app);
  // The exit code of `bench-step` if it was parsed, or -1.
  int run_parsed(const std::vector<std::string>& argv);

 private:
  CLI::App* command_ = nullptr;
  harness::StepBenchConfig config_;
  DistributedFlags dist_;
  std::string strategy_ = "full_shard", out_;
  bool no_prefetch_ = false;
};

}  // namespace fsdpp::cli
