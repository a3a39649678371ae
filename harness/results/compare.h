// The regression gate: compares a new fsdpp.results document against a baseline (one
// earlier document, or the last K documents of history for the same machine, their raw
// samples pooled per cell and metric). Cells match on (id, system); every metric with raw
// "samples" is tested with the two-sided Mann-Whitney U test (stats.h). A metric regresses
// only when BOTH p < alpha AND its median moved in the bad direction (from "better") by at
// least min_effect of the baseline median, or by more than the baseline's own runs differ
// (MetricComparison::baseline_run_spread) when that is larger: significance alone flags
// harmless 1% shifts of low-noise cells, effect size alone flags noise. The report formats
// (Markdown table, JSON
// "fsdpp.compare" version 1) are specified in results/README.md.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace fsdpp::results {

struct CompareOptions {
  double alpha = 0.01;               // Mann-Whitney two-sided significance level
  double min_effect = 0.05;          // smallest relative move of the median that counts (0.05 = 5%)
  double confirm_alpha = 0.1;        // a rerun's level when it confirms a regression (--confirm)
  bool allow_other_machine = false;  // compare across machine fingerprints anyway
  double ci_confidence = 0.95;       // bootstrap CI of the median ratio (reported, not gated)
  int ci_resamples = 2000;
  uint64_t ci_seed = 20261122;
};

enum class Verdict { Regression, Improvement, Unchanged, Missing, New };
const char* to_string(Verdict verdict);  // "regression", "improvement", ...

// A loaded document and the name errors and reports use for it (a path, usually).
struct SourcedDocument {
  nlohmann::json doc;
  std::string source;
};

// One metric of one cell. Medians, ratio, CI and p are absent where a side has no samples.
struct MetricComparison {
  std::string cell_id, system, metric, unit;
  std::string better;                // "lower", "higher" or "none" (never a regression)
  size_t baseline_n = 0, new_n = 0;  // finite raw samples on each side
  std::optional<double> baseline_median, new_median;
  std::optional<double> ratio;                  // new median / baseline median
  std::optional<double> ratio_low, ratio_high;  // bootstrap CI of that ratio
  std::optional<double> p;                      // Mann-Whitney two-sided
  bool p_exact = false;
  // How far the baseline's own runs (documents) sit apart: the largest |run median /
  // median of the run medians - 1|, the farthest run left out when there are 4 or more;
  // absent with fewer than 2 baseline runs. Steps within one run share its state (thread
  // placement, a neighbour's load on a shared VM), so the test over pooled samples cannot
  // see this run-to-run drift; the runs can.
  std::optional<double> baseline_run_spread;
  // The smallest move that counts here: max(min_effect, baseline_run_spread). Absent
  // where no ratio was computed.
  std::optional<double> min_effect_applied;
  Verdict verdict = Verdict::Unchanged;
  std::string note;  // why a metric is missing, or empty
};

struct Comparison {
  SourcedDocument current;  // the new document
  std::vector<std::string> baseline_sources;
  std::vector<std::string> baseline_run_ids;
  std::vector<std::string> baseline_fingerprints;
  CompareOptions options;
  // Regressions first, then improvements, missing, new, unchanged; within each, the order
  // of the cells in the new document (baseline-only cells after them), then metric name.
  std::vector<MetricComparison> rows;
  std::vector<std::string> confirmation_sources;  // reruns that confirm_regressions() applied

  size_t count(Verdict verdict) const;
  bool has_regression() const { return count(Verdict::Regression) > 0; }
};

// Compares `current` against the pooled samples of `baseline` (one or more documents,
// validated v1). Throws std::runtime_error "<source>: <what>" when `baseline` is empty,
// when a baseline document's machine fingerprint differs from current's and
// !options.allow_other_machine, or when a metric's unit or direction differs between them.
Comparison compare_documents(const SourcedDocument& current, const std::vector<SourcedDocument>& baseline,
                             const CompareOptions& options);

// Confirmation by a rerun (ci/gate.sh): `first`'s regressions stand only where
// `rerun` (the regressed cells benchmarked again and compared against the same baseline)
// regresses too, in the same cell, system and metric; the others become unchanged, their
// note giving the rerun's ratio and p. A regression whose cell the rerun lacks stands.
// Why: a stall of a shared machine during one run shifts every repetition of a cell
// alike, which a test over those repetitions cannot tell from a regression; a stall
// rarely strikes the same cell twice, a real regression always does.
void confirm_regressions(Comparison& first, const Comparison& rerun);

// The `fsdpp bench --filter` regex selecting exactly the cells with a regression:
// "^(id1|id2)$" with regex metacharacters escaped; "" when there is none.
std::string regressed_cells_filter(const Comparison& comparison);

// The last `window` documents of load_history(history_dir, current's fingerprint), oldest
// first, leaving out a document with current's run_id (current may already be appended).
// Sources read "<history_dir>/<fingerprint>/<run_id>.json". Throws std::runtime_error
// naming history_dir when no such document exists.
std::vector<SourcedDocument> history_baseline(const std::filesystem::path& history_dir, const nlohmann::json& current,
                                              size_t window);

// A Markdown summary line and table: cell, metric, baseline median, new median, ratio
// (with its CI), p, verdict; rows in Comparison order.
std::string to_markdown(const Comparison& comparison);

// The "fsdpp.compare" version 1 report (results/README.md).
nlohmann::json to_json(const Comparison& comparison);

}  // namespace fsdpp::results
