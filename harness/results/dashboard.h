// `fsdpp results dashboard`: one self-contained static HTML page (no network, no external
// scripts, fonts or stylesheets; charts are inline SVG drawn here) for one machine's
// history of fsdpp.results documents:
//   - the latest document's matrix as a table: medians, ratios against the baseline
//     (compare.h verdicts; regressions get the CSS class "regression") and, for fsdpp
//     cells, tokens/s against the PyTorch peer cells of the same document (pytorch_ddp
//     and pytorch_fsdp2: same model, dtype, AC, world size and batch per rank;
//     pytorch_single: same model, dtype, AC and global batch; the bench matrix's
//     peer_matches);
//   - per cell, trend charts over the history of the median tokens/s and step ms.
// Every string taken from a document is HTML-escaped.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "harness/results/compare.h"

namespace fsdpp::results {

// Line colours of the trend charts (tests look for them in screenshots).
constexpr const char* kTokensChartStroke = "#1f6fd0";
constexpr const char* kStepChartStroke = "#e07b00";
// Fill of every chart's plot area.
constexpr const char* kChartPlotFill = "#f3f6fb";

struct DashboardOptions {
  std::filesystem::path history_dir;    // <dir>/<fingerprint>/<run_id>.json (append_to_history)
  std::string machine;                  // fingerprint; empty: the machine with the newest document
  std::filesystem::path baseline_file;  // empty: the `window` documents before the latest
  size_t window = 5;
  CompareOptions compare;
};

// Loads what `options` names and renders the page. Throws std::runtime_error naming the
// directory or file at fault (no history, an invalid document, another machine's baseline).
std::string build_dashboard(const DashboardOptions& options);

// The page for `history` (one machine, oldest first, not empty; the last is "latest") and,
// when not null, the latest document's comparison against its baseline.
std::string render_dashboard(const std::vector<SourcedDocument>& history, const Comparison* comparison);

// & < > " ' as character references.
std::string html_escape(std::string_view text);

}  // namespace fsdpp::results
