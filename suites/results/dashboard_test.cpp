// The dashboard page (harness/results/dashboard.h) as text: self-contained, escaped,
// one chart per cell and metric, regressions marked, peer ratios. How it renders in a
// browser is dashboard_chromium_test.cpp.
#include "harness/results/dashboard.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <regex>

#include "harness/results/results_document.h"
#include "harness/testing/synthetic_results.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::results {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kDashboardMachine = "0a1b2c3d4e5f6789";

size_t occurrences(const std::string& text, const std::string& what) {
  size_t count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++count;
  return count;
}

// The matrix table's row of cell `id` (the first row naming it on the page).
std::string matrix_row(const std::string& html, const std::string& id) {
  const auto start = html.find("<td class=\"id\">" + id + "</td>");
  if (start == std::string::npos) return "";
  return html.substr(start, html.find("</tr>", start) - start);
}

std::string trend_page(harness::TempDir& dir) {
  for (const auto& doc : harness::trend_history(kDashboardMachine)) append_to_history(dir.path(), doc);
  DashboardOptions options;
  options.history_dir = dir.path();
  return build_dashboard(options);
}

TEST(Dashboard, MarksTheRegressedCellOfTheLatestRun) {
  harness::TempDir dir;
  const std::string html = trend_page(dir);
  EXPECT_THAT(html, HasSubstr("<tr class=\"regression\"><td class=\"id\">" + std::string(harness::kTrendCellId)));
  EXPECT_THAT(html, HasSubstr("<tr class=\"ok\"><td class=\"id\">" + std::string(harness::kSteadyCellId)));
  EXPECT_THAT(html, HasSubstr("class=\"summary has-regression\""));
  EXPECT_THAT(html, HasSubstr("tr.regression td { background: #fde2e1; }"));
  // The trend cell's last tokens/s (3 values against 9 pooled: p = 2 / C(12, 3) < 0.01)
  // and last step time; nothing else.
  EXPECT_EQ(occurrences(html, "regression-point"), 2u);
}

TEST(Dashboard, DrawsTwoTrendChartsPerCellWithAxesAndLabels) {
  harness::TempDir dir;
  const std::string html = trend_page(dir);
  EXPECT_EQ(occurrences(html, "<svg class=\"chart\""), 8u);  // 4 cells x (tokens/s, step ms)
  EXPECT_EQ(occurrences(html, std::string("stroke=\"") + kTokensChartStroke + "\""), 4u);
  EXPECT_EQ(occurrences(html, std::string("stroke=\"") + kStepChartStroke + "\""), 4u);
  EXPECT_EQ(occurrences(html, "<line class=\"axis\" x1=\"72\""), 16u);  // y and x axis lines
  EXPECT_THAT(html, HasSubstr(">run (oldest to newest)</text>"));
  EXPECT_THAT(html, HasSubstr(">11-01 03:00</text>"));  // the latest run's x label
  // Four points per line: the polyline of the trend cell's step time has four coordinates.
  std::smatch match;
  const std::string step_line =
      std::string("stroke=\"") + kStepChartStroke + "\" stroke-width=\"2.5\" points=\"([^\"]*)\"";
  ASSERT_TRUE(std::regex_search(html, match, std::regex(step_line)));
  EXPECT_EQ(occurrences(match[1].str(), ","), 4u);
}

TEST(Dashboard, ComparesFsdppCellsWithTheirPyTorchPeers) {
  harness::TempDir dir;
  const std::string html = trend_page(dir);
  // The steady no_shard cell: 80 ms against DDP's 90 ms (same ranks and batch per rank)
  // and single's 150 ms (same global batch): tokens/s ratios 90 / 80 and 150 / 80, within
  // the noise of medians of three.
  const std::string row = matrix_row(html, harness::kSteadyCellId);
  std::smatch match;
  ASSERT_TRUE(std::regex_search(row, match, std::regex("against gpt2-mini/pytorch_ddp/fp32/n2/ac0\">([0-9.]+)&times;")))
      << row;
  EXPECT_NEAR(std::stod(match[1]), 90.0 / 80, 0.1);
  ASSERT_TRUE(
      std::regex_search(row, match, std::regex("against gpt2-mini/pytorch_single/fp32/n1-gb16/ac0\">([0-9.]+)&times;")))
      << row;
  EXPECT_NEAR(std::stod(match[1]), 150.0 / 80, 0.15);
  EXPECT_THAT(matrix_row(html, "gpt2-mini/pytorch_ddp/fp32/n2/ac0"), Not(HasSubstr("tokens/s against")));
}

TEST(Dashboard, ComparesFsdppCellsWithFsdp2OnTheSameRanksAndBatchPerRank) {
  harness::TempDir dir;
  for (auto doc : harness::trend_history(kDashboardMachine)) {
    harness::SyntheticCell fsdp2;
    fsdp2.id = "gpt2-mini/pytorch_fsdp2/fp32/n2/ac0";
    fsdp2.system = "pytorch_fsdp2";
    fsdp2.step_ms = {100, 100, 100};
    doc["cells"].push_back(harness::synthetic_cell(fsdp2));
    harness::SyntheticCell other_ranks = fsdp2;  // 4 ranks: not the n2 cells' peer
    other_ranks.id = "gpt2-mini/pytorch_fsdp2/fp32/n4/ac0";
    other_ranks.world_size = 4;
    other_ranks.step_ms = {10, 10, 10};
    doc["cells"].push_back(harness::synthetic_cell(other_ranks));
    append_to_history(dir.path(), doc);
  }
  DashboardOptions options;
  options.history_dir = dir.path();
  const std::string html = build_dashboard(options);
  EXPECT_THAT(html, HasSubstr("<th>tokens/s vs<br>pytorch_fsdp2</th>"));
  // The steady cell: 80 ms against FSDP2's 100 ms on the same 2 ranks: 100 / 80.
  std::smatch match;
  const std::string row = matrix_row(html, harness::kSteadyCellId);
  ASSERT_TRUE(
      std::regex_search(row, match, std::regex("against gpt2-mini/pytorch_fsdp2/fp32/n2/ac0\">([0-9.]+)&times;")))
      << row;
  EXPECT_NEAR(std::stod(match[1]), 100.0 / 80, 0.1);  // the fsdpp medians carry 3% noise
}

TEST(Dashboard, EscapesEveryStringFromTheDocuments) {
  auto runs = harness::trend_history(kDashboardMachine);
  auto& latest = runs.back();
  latest["machine"]["hostname"] = "<b>host</b>&\"'";
  latest["cells"][0]["id"] = "<script>alert(1)</script>";
  latest["command"] = {"fsdpp", "</code><img>"};
  latest["cells"][1]["status"] = "failed";
  latest["cells"][1]["reason"] = "\"><svg onload=alert(2)>";
  std::vector<SourcedDocument> history;
  for (auto& doc : runs) history.push_back({doc, "x"});
  const std::string html = render_dashboard(history, nullptr);
  EXPECT_THAT(html, Not(HasSubstr("<script>alert")));
  EXPECT_THAT(html, Not(HasSubstr("<b>host")));
  EXPECT_THAT(html, Not(HasSubstr("<img>")));
  EXPECT_THAT(html, Not(HasSubstr("\"><svg onload")));
  EXPECT_THAT(html, HasSubstr("&lt;script&gt;alert(1)&lt;/script&gt;"));
  EXPECT_THAT(html, HasSubstr("&lt;b&gt;host&lt;/b&gt;&amp;&quot;&#39;"));
  EXPECT_EQ(occurrences(html, "<script>"), 1u);  // the page's own
}

TEST(Dashboard, IsSelfContained) {
  harness::TempDir dir;
  const std::string html = trend_page(dir);
  // The only URL is SVG's namespace name, which is never fetched.
  std::string without_namespace = std::regex_replace(html, std::regex("xmlns=\"http://www.w3.org/2000/svg\""), "");
  EXPECT_THAT(without_namespace, Not(HasSubstr("http:")));
  EXPECT_THAT(without_namespace, Not(HasSubstr("https:")));
  EXPECT_THAT(html, Not(HasSubstr(" src=")));
  EXPECT_THAT(html, Not(HasSubstr("@import")));
  EXPECT_THAT(html, Not(HasSubstr("url(")));
  EXPECT_THAT(html, Not(HasSubstr("rel=\"stylesheet\"")));
}

TEST(Dashboard, AnExplicitBaselineReplacesTheHistoryWindow) {
  harness::TempDir dir;
  auto runs = harness::trend_history(kDashboardMachine);
  for (const auto& doc : runs) append_to_history(dir.path(), doc);
  DashboardOptions options;
  options.history_dir = dir.path();
  options.baseline_file = dir.path() / kDashboardMachine / (runs[3]["run_id"].get<std::string>() + ".json");
  const std::string html = build_dashboard(options);  // the latest against itself
  EXPECT_THAT(html, Not(HasSubstr("<tr class=\"regression\">")));
  EXPECT_THAT(html, HasSubstr("0 regression(s)"));
}

TEST(Dashboard, ASingleRunHasNoBaselineButStillCharts) {
  harness::TempDir dir;
  append_to_history(dir.path(), harness::trend_history(kDashboardMachine).front());
  DashboardOptions options;
  options.history_dir = dir.path();
  const std::string html = build_dashboard(options);
  EXPECT_THAT(html, HasSubstr("No baseline"));
  EXPECT_EQ(occurrences(html, "<svg class=\"chart\""), 8u);
}

TEST(Dashboard, NoHistoryIsAnErrorNamingTheDirectory) {
  harness::TempDir dir;
  DashboardOptions options;
  options.history_dir = dir.path();
  try {
    build_dashboard(options);
    FAIL() << "rendered an empty history";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr(dir.path().string()));
  }
}

}  // namespace
}  // namespace fsdpp::results
