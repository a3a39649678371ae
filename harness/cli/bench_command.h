// `fsdpp bench-step`: one benchmark cell (harness/bench/step_bench.h) on N local ranks
// (--nproc) or under torchrun/srun; rank 0 prints a summary line and writes the cell's
// JSON (--out).
//
// `fsdpp bench`: the benchmark matrix (harness/bench/matrix.h): the cells of a preset,
// optionally filtered, run with Google Benchmark underneath (harness/bench/matrix_run.h),
// written as an fsdpp.results document (--out, and --history DIR); exits 1 if a cell
// failed (the document is written all the same). `fsdpp bench --table FILE` prints the
// README baseline table of a results document (harness/results/baseline_table.h).
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "harness/bench/matrix_run.h"
#include "harness/bench/step_bench.h"
#include "harness/cli/command.h"
#include "harness/cli/distributed.h"

namespace fsdpp::cli {

class BenchCommand final : public Command {
 public:
  // Command (command.h): parsed() if `bench-step` or `bench` was.
  void add_to(CLI::App& app) override;
  bool parsed() const override;
  void check() override;
  int run(const std::vector<std::string>& argv) override;

 private:
  int run_step(const std::vector<std::string>& argv);
  int run_matrix(const std::vector<std::string>& argv);

  CLI::App* command_ = nullptr;
  harness::StepBenchConfig config_;
  DistributedFlags dist_;
  std::string strategy_ = "full_shard", out_;
  bool no_prefetch_ = false;
  bool no_count_cpu_tensors_ = false;

  CLI::App* matrix_command_ = nullptr;
  harness::MatrixRunOptions matrix_;
  std::string preset_, filter_, matrix_out_, history_, table_;
  bool list_ = false;
  bool resume_ = false;
  bool no_bind_cores_ = false;
};

}  // namespace fsdpp::cli
