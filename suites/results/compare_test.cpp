// The regression gate (harness/results/compare.h) on synthetic documents whose samples come
// from a fixed-seed generator: what it must flag, what it must not, and its reports.
#include "harness/results/compare.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness/results/results_document.h"
#include "harness/testing/synthetic_results.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::results {
namespace {

using harness::noisy_samples;
using harness::SyntheticCell;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr const char* kMachine = "00112233aabbccdd";
constexpr const char* kOtherMachine = "ffeeddcc99887766";

SourcedDocument document(const std::vector<SyntheticCell>& cells, int index, const std::string& machine = kMachine) {
  json doc = harness::synthetic_document(machine, index);
  for (const auto& cell : cells) doc["cells"].push_back(harness::synthetic_cell(cell));
  validate_results(doc, "synthetic");
  return {doc, "run" + std::to_string(index) + ".json"};
}

// One cell with 15 step times around `step_ms` and 10 tokens/s values around `tokens_per_s`.
SyntheticCell cell(double step_ms, double tokens_per_s, double noise, uint64_t seed) {
  SyntheticCell c;
  c.step_ms = noisy_samples(step_ms, noise, 15, seed);
  c.tokens_per_s = noisy_samples(tokens_per_s, noise, 10, seed + 1000);
  return c;
}

// A copy, not a reference: the tests call it on compare_documents()'s temporary result too
// (`const auto& r = row(compare_documents(...), ...)` once read freed memory; ci/sanitize.sh).
MetricComparison row(const Comparison& comparison, const std::string& metric) {
  for (const auto& r : comparison.rows)
    if (r.metric == metric) return r;
  throw std::runtime_error("no row for " + metric);
}

TEST(Gate, IdenticalDistributionsRaiseNoAlarmOverFiftyTrials) {
  for (uint64_t trial = 0; trial < 50; ++trial) {
    auto base = document({cell(100, 2000, 0.03, 2 * trial)}, 0);
    auto now = document({cell(100, 2000, 0.03, 2 * trial + 1)}, 1);
    auto comparison = compare_documents(now, {base}, {});
    EXPECT_EQ(comparison.count(Verdict::Regression), 0u) << "trial " << trial << "\n" << to_markdown(comparison);
    EXPECT_EQ(comparison.count(Verdict::Improvement), 0u) << "trial " << trial;
    EXPECT_EQ(comparison.count(Verdict::Unchanged), 2u);
  }
}

TEST(Gate, FifteenPercentSlowerStepsAreARegression) {
  auto base = document({cell(100, 2000, 0.03, 1)}, 0);
  auto now = document({cell(115, 2000, 0.03, 2)}, 1);
  auto comparison = compare_documents(now, {base}, {});
  const auto& step = row(comparison, "step_ms");
  EXPECT_EQ(step.verdict, Verdict::Regression);
  EXPECT_LT(*step.p, 0.01);
  EXPECT_NEAR(*step.ratio, 1.15, 0.03);
  EXPECT_LT(*step.ratio_low, *step.ratio);
  EXPECT_GT(*step.ratio_high, *step.ratio);
  EXPECT_TRUE(comparison.has_regression());
  EXPECT_EQ(row(comparison, "tokens_per_s").verdict, Verdict::Unchanged);
}

TEST(Gate, FifteenPercentFasterStepsAreAnImprovementNotARegression) {
  auto base = document({cell(100, 2000, 0.03, 3)}, 0);
  auto now = document({cell(100 / 1.15, 2000, 0.03, 4)}, 1);
  auto comparison = compare_documents(now, {base}, {});
  EXPECT_EQ(row(comparison, "step_ms").verdict, Verdict::Improvement);
  EXPECT_FALSE(comparison.has_regression());
}

TEST(Gate, SignificantMoveBelowTheMinimumEffectIsNotFlagged) {
  auto base = document({cell(100, 2000, 0.002, 5)}, 0);
  auto now = document({cell(102, 2000, 0.002, 6)}, 1);
  auto comparison = compare_documents(now, {base}, {});
  const auto& step = row(comparison, "step_ms");
  EXPECT_LT(*step.p, 1e-4);                     // clearly significant...
  EXPECT_EQ(step.verdict, Verdict::Unchanged);  // ...but 2% < 5%
  CompareOptions strict;
  strict.min_effect = 0.01;
  EXPECT_EQ(row(compare_documents(now, {base}, strict), "step_ms").verdict, Verdict::Regression);
}

TEST(Gate, FewerTokensPerSecondIsARegression) {
  auto base = document({cell(100, 2000, 0.03, 7)}, 0);
  auto now = document({cell(100, 2000 * 0.85, 0.03, 8)}, 1);
  auto comparison = compare_documents(now, {base}, {});
  EXPECT_EQ(row(comparison, "tokens_per_s").verdict, Verdict::Regression);
  EXPECT_EQ(row(comparison, "step_ms").verdict, Verdict::Unchanged);
}

TEST(Gate, MoreTokensPerSecondIsAnImprovement) {
  auto base = document({cell(100, 2000, 0.03, 9)}, 0);
  auto now = document({cell(100, 2000 * 1.15, 0.03, 10)}, 1);
  auto comparison = compare_documents(now, {base}, {});
  EXPECT_EQ(row(comparison, "tokens_per_s").verdict, Verdict::Improvement);
  EXPECT_FALSE(comparison.has_regression());
}

TEST(Gate, LargeMoveWithoutSignificanceIsNotARegression) {
  // Three tokens/s values per side can never give p < 0.1 (stats_test), whatever the move.
  SyntheticCell base_cell = cell(100, 2000, 0.03, 11), new_cell = cell(100, 1600, 0.03, 12);
  base_cell.tokens_per_s.resize(3);
  new_cell.tokens_per_s.resize(3);
  auto comparison = compare_documents(document({new_cell}, 1), {document({base_cell}, 0)}, {});
  const auto& tokens = row(comparison, "tokens_per_s");
  EXPECT_NEAR(*tokens.ratio, 0.8, 0.05);
  EXPECT_GE(*tokens.p, 0.1 - 1e-12);
  EXPECT_EQ(tokens.verdict, Verdict::Unchanged);
}

TEST(Gate, RefusesBaselinesFromAnotherMachine) {
  auto base = document({cell(100, 2000, 0.03, 13)}, 0, kOtherMachine);
  auto now = document({cell(100, 2000, 0.03, 14)}, 1);
  try {
    compare_documents(now, {base}, {});
    FAIL() << "compared across machines";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("run0.json"));
    EXPECT_THAT(e.what(), HasSubstr(kOtherMachine));
    EXPECT_THAT(e.what(), HasSubstr("--allow-other-machine"));
  }
  CompareOptions anyway;
  anyway.allow_other_machine = true;
  EXPECT_FALSE(compare_documents(now, {base}, anyway).has_regression());
}

TEST(Gate, CellsMatchOnIdAndSystem) {
  SyntheticCell fsdpp_cell = cell(100, 2000, 0.03, 15);
  SyntheticCell ddp_cell = cell(100, 2000, 0.03, 16);
  ddp_cell.system = "pytorch_ddp";  // the same id under another system is another cell
  auto comparison = compare_documents(document({ddp_cell}, 1), {document({fsdpp_cell}, 0)}, {});
  EXPECT_EQ(comparison.count(Verdict::Missing), 2u) << to_markdown(comparison);
  EXPECT_EQ(comparison.count(Verdict::New), 2u);
  EXPECT_EQ(comparison.count(Verdict::Unchanged), 0u);
}

TEST(Gate, ReportsMissingAndNewCellsWithoutCallingThemRegressions) {
  SyntheticCell a = cell(100, 2000, 0.03, 19), b = cell(50, 4000, 0.03, 20), c = cell(70, 3000, 0.03, 21);
  b.id = "gpt2-mini/fsdp-no_shard/fp32/n2/pf1-ac0-off0-det0";
  c.id = "gpt2-mini/fsdp-shard_grad_op/fp32/n2/pf1-ac0-off0-det0";
  SyntheticCell b_failed = b;
  b_failed.status = "failed";
  auto comparison = compare_documents(document({a, b_failed, c}, 1), {document({a, b}, 0)}, {});
  EXPECT_EQ(comparison.count(Verdict::Missing), 2u);  // b's step_ms and tokens_per_s
  EXPECT_EQ(comparison.count(Verdict::New), 2u);      // c's
  EXPECT_FALSE(comparison.has_regression());
  for (const auto& r : comparison.rows) {
    if (r.verdict == Verdict::Missing) {
      EXPECT_EQ(r.cell_id, b.id);
      EXPECT_THAT(r.note, HasSubstr("status failed"));
    }
    if (r.verdict == Verdict::New) {
      EXPECT_EQ(r.cell_id, c.id);
    }
  }
}

TEST(Gate, ListsRegressionsFirstInTheTableAndTheJsonReport) {
  SyntheticCell fine = cell(100, 2000, 0.03, 22), slow = cell(100, 2000, 0.03, 23);
  fine.id = "a-first-in-the-document";
  slow.id = "z-last-in-the-document";
  SyntheticCell fine_now = cell(100, 2000, 0.03, 24), slow_now = cell(130, 2000, 0.03, 25);
  fine_now.id = fine.id;
  slow_now.id = slow.id;
  auto comparison = compare_documents(document({fine_now, slow_now}, 1), {document({fine, slow}, 0)}, {});
  ASSERT_EQ(comparison.rows.front().verdict, Verdict::Regression);
  EXPECT_EQ(comparison.rows.front().cell_id, slow.id);

  const std::string markdown = to_markdown(comparison);
  const auto header = markdown.find("| cell | metric | baseline median | new median |");
  ASSERT_NE(header, std::string::npos) << markdown;
  const auto first_row = markdown.find("\n| `", header);
  EXPECT_THAT(markdown.substr(first_row, markdown.find('\n', first_row + 1) - first_row), HasSubstr("**REGRESSION**"));

  const json report = to_json(comparison);
  EXPECT_EQ(report["format"], "fsdpp.compare");
  EXPECT_EQ(report["version"], 1);
  EXPECT_EQ(report["regression"], true);
  EXPECT_EQ(report["summary"]["regression"], 1);
  EXPECT_EQ(report["summary"]["unchanged"], 3);
  EXPECT_EQ(report["rows"][0]["verdict"], "regression");
  EXPECT_EQ(report["rows"][0]["cell"], slow.id);
  EXPECT_EQ(report["rows"][0]["p_method"], "normal");
  EXPECT_EQ(report["rows"][0]["ratio_ci"].size(), 2u);
  EXPECT_EQ(report["baseline"]["sources"], json::array({"run0.json"}));
}

TEST(Gate, UnitOrDirectionChangesAreBadInput) {
  auto base = document({cell(100, 2000, 0.03, 26)}, 0);
  auto error_of = [&](const SourcedDocument& now) -> std::string {
    try {
      compare_documents(now, {base}, {});
    } catch (const std::runtime_error& e) {
      return e.what();
    }
    return "(compared)";
  };
  auto unit = document({cell(100, 2000, 0.03, 27)}, 1);
  unit.doc["cells"][0]["samples"]["step_ms"]["unit"] = "s";
  EXPECT_THAT(error_of(unit), HasSubstr("samples.step_ms has unit 's'"));
  auto direction = document({cell(100, 2000, 0.03, 27)}, 1);
  direction.doc["cells"][0]["samples"]["step_ms"]["better"] = "higher";
  EXPECT_THAT(error_of(direction), HasSubstr("samples.step_ms has unit 'ms', better 'higher'"));
}

TEST(Gate, HistoryWindowPoolsTheLastDocumentsOfThisMachineOnly) {
  harness::TempDir dir("gate-history");
  for (int i = 0; i < 6; ++i) append_to_history(dir.path(), document({cell(100, 2000, 0.03, 100 + i)}, i).doc);
  append_to_history(dir.path(), document({cell(300, 900, 0.03, 200)}, 10, kOtherMachine).doc);
  auto now = document({cell(100, 2000, 0.03, 300)}, 6);
  append_to_history(dir.path(), now.doc);  // the new document itself is left out

  auto baseline = history_baseline(dir.path(), now.doc, 3);
  ASSERT_EQ(baseline.size(), 3u);
  EXPECT_EQ(baseline[0].doc["run_id"], harness::synthetic_document(kMachine, 3)["run_id"]);
  EXPECT_EQ(baseline[2].doc["run_id"], harness::synthetic_document(kMachine, 5)["run_id"]);
  auto comparison = compare_documents(now, baseline, {});
  EXPECT_EQ(row(comparison, "step_ms").baseline_n, 45u);  // 3 documents x 15 samples, pooled
  EXPECT_EQ(row(comparison, "tokens_per_s").baseline_n, 30u);
  EXPECT_FALSE(comparison.has_regression());

  harness::TempDir empty("gate-empty");
  EXPECT_THROW(history_baseline(empty.path(), now.doc, 3), std::runtime_error);
}

TEST(Gate, PooledHistoryMakesFewRepetitionsDecisive) {
  // Three tokens/s values per run cannot be significant against one run (p >= 0.1), but
  // against five pooled runs (15 values) a 15% drop is.
  std::vector<SourcedDocument> history;
  for (int i = 0; i < 5; ++i) {
    SyntheticCell c = cell(100, 2000, 0.03, 400 + i);
    c.tokens_per_s.resize(3);
    history.push_back(document({c}, i));
  }
  SyntheticCell slow = cell(100, 1700, 0.03, 500);
  slow.tokens_per_s.resize(3);
  auto now = document({slow}, 5);
  EXPECT_EQ(row(compare_documents(now, {history.back()}, {}), "tokens_per_s").verdict, Verdict::Unchanged);
  EXPECT_EQ(row(compare_documents(now, history, {}), "tokens_per_s").verdict, Verdict::Regression);
}

// Runs of identical code on a shared VM drift apart by more than the 5% minimum effect
// (measured: three runs of the 2-thread unsharded gpt2-tiny cell 9% apart, each with 60
// steps that make p tiny). A new run no further off than the baseline's runs are from each
// other is that drift; one further off is not.
TEST(Gate, AMoveWithinTheSpreadOfTheBaselinesOwnRunsIsNotARegression) {
  const std::vector<SourcedDocument> history = {document({cell(100, 2000, 0.01, 600)}, 0),
                                                document({cell(108, 2000, 0.01, 601)}, 1),
                                                document({cell(101, 2000, 0.01, 602)}, 2)};
  auto drift = document({cell(107, 2000, 0.01, 603)}, 3);
  auto comparison = compare_documents(drift, history, {});
  const auto& within = row(comparison, "step_ms");
  EXPECT_LT(*within.p, 0.01);
  EXPECT_GE(*within.ratio, 1.05);  // past the minimum effect...
  ASSERT_TRUE(within.baseline_run_spread.has_value());
  EXPECT_NEAR(*within.baseline_run_spread, 108.0 / 101.0 - 1, 0.01);  // ...but not past the runs' spread
  EXPECT_DOUBLE_EQ(*within.min_effect_applied, *within.baseline_run_spread);
  EXPECT_EQ(within.verdict, Verdict::Unchanged);
  EXPECT_THAT(within.note, HasSubstr("within the 6."));
  EXPECT_THAT(within.note, HasSubstr("the baseline's own runs differ by"));
  const auto report = to_json(comparison);
  for (const auto& r : report["rows"]) {
    if (r["metric"] == "step_ms") {
      EXPECT_DOUBLE_EQ(r["min_effect_applied"].get<double>(), *within.min_effect_applied);
    }
  }

  auto slow = document({cell(116, 2000, 0.01, 604)}, 3);
  EXPECT_EQ(row(compare_documents(slow, history, {}), "step_ms").verdict, Verdict::Regression);

  // Against one run there is no spread to measure: the minimum effect alone applies.
  const auto& single = row(compare_documents(drift, {history[0]}, {}), "step_ms");
  EXPECT_FALSE(single.baseline_run_spread.has_value());
  EXPECT_EQ(single.verdict, Verdict::Regression);
}

TEST(Gate, AMetricWithoutADirectionIsNeverJudgedEvenWithNoMinimumEffect) {
  auto with_undirected = [](SourcedDocument d, double value) {
    d.doc["cells"][0]["samples"]["threads_seen"] = {
        {"unit", "threads"}, {"better", "none"}, {"values", noisy_samples(value, 0.01, 15, 800)}};
    validate_results(d.doc, "synthetic");
    return d;
  };
  auto base = with_undirected(document({cell(100, 2000, 0.01, 801)}, 0), 10);
  auto now = with_undirected(document({cell(100, 2000, 0.01, 802)}, 1), 20);
  CompareOptions no_minimum;
  no_minimum.min_effect = 0;
  const auto& r = row(compare_documents(now, {base}, no_minimum), "threads_seen");
  EXPECT_LT(*r.p, 0.01);
  EXPECT_EQ(r.verdict, Verdict::Unchanged);
  EXPECT_EQ(r.note, "");
}

TEST(Gate, OneBaselineRunTakenUnderLoadDoesNotBlindTheGate) {
  // Four runs, one of them 3x slower: with 4 or more runs the farthest is left out of
  // the spread, so 15% slower is still a regression.
  const std::vector<SourcedDocument> history = {
      document({cell(100, 2000, 0.01, 700)}, 0), document({cell(101, 2000, 0.01, 701)}, 1),
      document({cell(300, 2000, 0.01, 702)}, 2), document({cell(99, 2000, 0.01, 703)}, 3)};
  const auto& r = row(compare_documents(document({cell(116, 2000, 0.01, 704)}, 4), history, {}), "step_ms");
  EXPECT_LT(*r.baseline_run_spread, 0.02);
  EXPECT_EQ(r.verdict, Verdict::Regression);
}

// Confirmation by a rerun (ci/gate.sh): a one-run stall (every repetition of a cell 15%
// slower) is a regression on its own; a rerun that is back to normal clears it, a rerun
// that is slow again confirms it, and a cell the rerun lacks stands.
TEST(Gate, ARegressionStandsOnlyWhereTheRerunRegressesToo) {
  auto base = document({cell(100, 2000, 0.03, 41)}, 0);
  SyntheticCell stalled = cell(115, 2000, 0.03, 42);
  SyntheticCell other = cell(130, 2000, 0.03, 43);
  other.id = "gpt2-tiny/unsharded/fp32/n1-gb8/ac0-det0";
  SyntheticCell base_other = cell(100, 2000, 0.03, 44);
  base_other.id = other.id;
  base = document({cell(100, 2000, 0.03, 41), base_other}, 0);
  auto now = document({stalled, other}, 1);
  auto first = compare_documents(now, {base}, {});
  ASSERT_EQ(first.count(Verdict::Regression), 2u) << to_markdown(first);
  EXPECT_EQ(regressed_cells_filter(first),
            "^(gpt2-mini/fsdp-full_shard/fp32/n2/pf1-ac0-off0-det0|gpt2-tiny/unsharded/fp32/n1-gb8/ac0-det0)$");

  // The rerun: the stalled cell is back to normal, the other one was not rerun.
  auto cleared = first;
  confirm_regressions(cleared, compare_documents(document({cell(100, 2000, 0.03, 45)}, 2), {base}, {}));
  ASSERT_EQ(cleared.count(Verdict::Regression), 1u) << to_markdown(cleared);
  EXPECT_EQ(cleared.rows[0].cell_id, other.id);
  EXPECT_EQ(cleared.rows[0].note, "not rerun: stands unconfirmed");
  const auto& step = [&]() -> const MetricComparison& {
    for (const auto& r : cleared.rows)
      if (r.cell_id != other.id && r.metric == "step_ms") return r;
    throw std::runtime_error("no step_ms row");
  }();
  EXPECT_EQ(step.verdict, Verdict::Unchanged);
  EXPECT_THAT(step.note, HasSubstr("regressed, not confirmed by the rerun (ratio "));
  EXPECT_THAT(to_markdown(cleared),
              HasSubstr("Regressions were rerun: each stands only if run2.json regressed too (p < 0.1, median 5% or "
                        "more worse)"));
  EXPECT_EQ(to_json(cleared)["confirmed_by"], json::array({"run2.json"}));

  // A real regression is slow again in the rerun: confirmed.
  auto confirmed = first;
  confirm_regressions(confirmed, compare_documents(document({cell(115, 2000, 0.03, 46), other}, 3), {base}, {}));
  EXPECT_EQ(confirmed.count(Verdict::Regression), 2u) << to_markdown(confirmed);
  EXPECT_THAT(confirmed.rows[0].note, HasSubstr("confirmed by the rerun (ratio 1.1"));
  EXPECT_EQ(regressed_cells_filter(compare_documents(base, {base}, {})), "");
}

}  // namespace
}  // namespace fsdpp::results
