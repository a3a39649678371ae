// Runs benchmark cells with Google Benchmark underneath.
//
// Every cell that can run here is registered as
//   benchmark::RegisterBenchmark(id)->UseManualTime()->Iterations(timed_steps)
//                                   ->Repetitions(R)->Unit(kMillisecond)
// and one call of its function is one repetition: the function launches the cell's ranks
// as a fresh command (cell_run.h), which warm up and time their steps, then feeds each
// timed step's time (the slowest rank's) to state.SetIterationTime. So a repetition's
// manual time is the sum of its step times, and Google Benchmark's console shows each
// repetition and the aggregates (mean, median, stddev, cv) as usual. A reporter (the
// ConsoleReporter, also keeping every per-repetition Run) hands back each repetition's
// manual time, from which tokens/s per repetition is computed; the raw per-step samples
// travel beside it from the function, and the two are checked against each other.
//
// Why this way: Google Benchmark owns repetitions, manual timing, aggregates and the
// console format, while the thing timed (a multi-process training step) runs elsewhere;
// feeding measured step times is what UseManualTime is for. Cells are selected before
// registration with matrix.h's filter_cells (regex over exact ids), not with
// --benchmark_filter, which would see the ids with "/iterations:5/repeats:3/manual_time"
// appended.
//
// (Debian's libbenchmark prints "Library was built as DEBUG": that is about Google
// Benchmark's own timing overhead, which manual time does not include.)
//
// Cells known to be unavailable (cell_run.h unavailable_reason) are recorded without
// running; so are the cells in `finished` (their repetition times are the sums of their
// step times, which Google Benchmark's manual times are checked to equal when they ran). A repetition that fails, or
// finds its system unavailable (CellUnavailable), settles the cell's status and reason, and its remaining repetitions
// are skipped (SkipWithError), so a broken cell costs one launch.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "harness/bench/cell_result.h"
#include "harness/bench/cell_run.h"
#include "harness/bench/matrix.h"

namespace fsdpp::harness {

struct MatrixRunOptions {
  CellRunSetup setup;
  int repetitions = 3;
  // Outcomes an interrupted run of the same command finished (BenchProgress::finished), by
  // cell id: taken as they are and not run again.
  std::map<std::string, CellOutcome> finished;
  // Called once for every cell this run settles, as soon as it is settled: after its last
  // repetition, or when a repetition found it failed or unavailable (BenchProgress::record).
  std::function<void(const CellOutcome&)> on_cell_settled;
};

// Runs `cells` in order (ids must be unique: throws std::invalid_argument naming a
// duplicate). Returns one outcome per cell, in the same order. Not thread-safe (Google
// Benchmark's registry is global).
std::vector<CellOutcome> run_matrix(const std::vector<BenchCell>& cells, const MatrixRunOptions& options);

}  // namespace fsdpp::harness
