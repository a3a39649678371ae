#include "harness/bench/matrix_run.h"

#include <benchmark/benchmark.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <stdexcept>

#include "harness/launch/run_ranks.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::harness {

namespace {

// Whether Google Benchmark marked a run as failed (SkipWithError): `error_occurred` up to
// 1.7 (Debian 12's), `skipped` from 1.8 (the GPU runner's).
template <typename Run>
auto errored(const Run& run, int = 0) -> decltype(static_cast<bool>(run.error_occurred)) {
  return run.error_occurred;
}
template <typename Run>
bool errored(const Run& run, long = 0) {
  return static_cast<int>(run.skipped) != 0;
}

// The console table, plus every per-repetition run kept by benchmark name.
class CollectingReporter : public benchmark::ConsoleReporter {
 public:
  CollectingReporter() : benchmark::ConsoleReporter(OO_Tabular) {}

  void ReportRuns(const std::vector<Run>& report) override {
    for (const auto& run : report)
      if (run.run_type == Run::RT_Iteration) runs[run.run_name.function_name].push_back(run);
    benchmark::ConsoleReporter::ReportRuns(report);
  }

  std::map<std::string, std::vector<Run>> runs;
};

void initialize_benchmark_once() {
  static bool done = false;
  if (done) return;
  // Only our own name: `fsdpp bench` has its own flags, not Google Benchmark's.
  static char name[] = "fsdpp-bench";
  static char* argv[] = {name, nullptr};
  int argc = 1;
  benchmark::Initialize(&argc, argv);
  done = true;
}

}  // namespace

std::vector<CellOutcome> run_matrix(const std::vector<BenchCell>& cells, const MatrixRunOptions& options) {
  if (options.repetitions < 1) throw std::invalid_argument("--repetitions must be >= 1");
  std::set<std::string> ids;
  for (const auto& c : cells)
    if (!ids.insert(c.id()).second) throw std::invalid_argument("benchmark cell '" + c.id() + "' is listed twice");

  std::vector<CellOutcome> outcomes;
  for (const auto& c : cells) {
    CellOutcome o;
    o.cell = c;
    o.repetitions_requested = options.repetitions;
    o.threads_per_rank = threads_per_rank(c, options.setup);
    o.device = options.setup.device;
    o.cores_bound = binds_cores(options.setup);
    o.injected_delay_pct = c.system == System::Fsdpp ? options.setup.inject_delay_pct : 0;
    if (auto reason = unavailable_reason(c, options.setup)) {
      o.status = "unavailable";
      o.reason = *reason;
    }
    outcomes.push_back(std::move(o));
  }
  std::vector<bool> earlier(outcomes.size(), false);  // settled by an interrupted run
  for (size_t i = 0; i < outcomes.size(); ++i) {
    auto it = options.finished.find(outcomes[i].cell.id());
    if (it == options.finished.end()) continue;
    CellOutcome& o = outcomes[i];
    o.status = it->second.status;
    o.reason = it->second.reason;
    o.repetitions = it->second.repetitions;
    o.repetition_seconds = it->second.repetition_seconds;
    if (o.status == "ok" && o.repetitions.size() != static_cast<size_t>(options.repetitions))
      throw std::invalid_argument("bench: " + o.cell.id() + ": the interrupted run measured " +
                                  std::to_string(o.repetitions.size()) + " repetitions, this one asks for " +
                                  std::to_string(options.repetitions));
    earlier[i] = true;
  }
  auto settled = [&options](const CellOutcome& o) {
    if (options.on_cell_settled) options.on_cell_settled(o);
  };

  initialize_benchmark_once();
  benchmark::ClearRegisteredBenchmarks();
  const size_t total = outcomes.size();
  const auto start = std::chrono::steady_clock::now();
  auto elapsed_s = [start] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  size_t registered = 0;
  for (size_t i = 0; i < total; ++i) {
    CellOutcome& o = outcomes[i];
    if (earlier[i]) {
      std::fprintf(stderr, "bench: [%zu/%zu] %s: %s in the interrupted run\n", i + 1, total, o.cell.id().c_str(),
                   o.status.c_str());
      continue;
    }
    if (o.status != "ok") {
      std::fprintf(stderr, "bench: [%zu/%zu] %s: %s: %s\n", i + 1, total, o.cell.id().c_str(), o.status.c_str(),
                   o.reason.c_str());
      continue;
    }
    ++registered;
    auto body = [&o, &options, i, total, elapsed_s, settled](benchmark::State& state) {
      if (o.status != "ok") {  // an earlier repetition settled it
        state.SkipWithError(("skipped: " + o.status + " in an earlier repetition").c_str());
        return;
      }
      if (o.repetitions.empty()) {
        std::fprintf(stderr, "bench: [%zu/%zu] %s (at %.0f s)\n", i + 1, total, o.cell.id().c_str(), elapsed_s());
        std::fflush(stderr);
      }
      RepetitionResult result;
      try {
        TempDir work("fsdpp-bench");
        result = run_cell_once(o.cell, options.setup, work.path());
      } catch (const CellUnavailable& e) {
        o.status = "unavailable";
        o.reason = e.what();
        state.SkipWithError(("unavailable: " + o.reason).c_str());
        settled(o);
        return;
      } catch (const std::exception& e) {
        o.status = "failed";
        o.reason = exception_message(e);
        state.SkipWithError(("failed: " + o.reason).c_str());
        settled(o);
        return;
      }
      size_t k = 0;
      double seconds = 0;
      for (auto _ : state) {
        const double s = result.step_ms.at(k++) / 1e3;
        seconds += s;
        state.SetIterationTime(s);
      }
      state.counters["tokens_per_s"] =
          static_cast<double>(o.cell.global_batch() * o.cell.model.seq_len) * static_cast<double>(k) / seconds;
      o.repetitions.push_back(std::move(result));
      if (o.repetitions.size() == static_cast<size_t>(options.repetitions)) settled(o);
    };
    benchmark::RegisterBenchmark(o.cell.id().c_str(), body)
        ->UseManualTime()
        ->Iterations(o.cell.model.timed_steps)
        ->Repetitions(options.repetitions)
        ->Unit(benchmark::kMillisecond);
  }

  if (registered > 0) {
    CollectingReporter reporter;
    benchmark::RunSpecifiedBenchmarks(&reporter, ".");
    benchmark::ClearRegisteredBenchmarks();
    for (size_t i = 0; i < total; ++i) {
      CellOutcome& o = outcomes[i];
      if (earlier[i]) continue;
      if (o.status != "ok") {
        o.repetitions.clear();  // a cell is measured in full or not at all
        continue;
      }
      const auto& runs = reporter.runs[o.cell.id()];
      if (runs.size() != o.repetitions.size() || runs.size() != static_cast<size_t>(options.repetitions))
        throw std::logic_error("bench: " + o.cell.id() + ": Google Benchmark reported " + std::to_string(runs.size()) +
                               " repetitions, the cell recorded " + std::to_string(o.repetitions.size()) +
                               ", expected " + std::to_string(options.repetitions));
      for (size_t r = 0; r < runs.size(); ++r) {
        const double seconds = runs[r].real_accumulated_time;
        if (errored(runs[r], 0) || runs[r].iterations != static_cast<int64_t>(o.repetitions[r].step_ms.size()) ||
            std::abs(seconds - o.repetitions[r].seconds()) > 1e-9 + 1e-9 * seconds)
          throw std::logic_error("bench: " + o.cell.id() + ": repetition " + std::to_string(r) +
                                 " as Google Benchmark reports it (" + std::to_string(runs[r].iterations) +
                                 " iterations, " + std::to_string(seconds) + " s) differs from its samples");
        o.repetition_seconds.push_back(seconds);
      }
    }
  }
  return outcomes;
}

}  // namespace fsdpp::harness
