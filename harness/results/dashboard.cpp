#include "harness/results/dashboard.h"

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <stdexcept>
#include <tuple>

#include "harness/results/printf_text.h"
#include "harness/results/results_document.h"
#include "harness/results/stats.h"

namespace fsdpp::results {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// doc["cells"] by reference (pointers into it outlive the loop), or an empty array.
const json& cells_of(const json& doc) {
  static const json empty = json::array();
  if (!doc.is_object()) return empty;
  const auto it = doc.find("cells");
  return it != doc.end() && it->is_array() ? *it : empty;
}

std::string str(const json& object, const char* key) {
  if (!object.is_object()) return "";
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return "";
  return it->is_string() ? it->get<std::string>() : it->dump();
}

std::string e(std::string_view text) { return html_escape(text); }

// The median of a cell's raw samples `sample`, else the aggregate metrics[`metric`].value;
// nothing for cells that did not run ok.
std::optional<double> cell_value(const json& cell, const char* sample, const char* metric) {
  if (cell.value("status", std::string()) != "ok") return std::nullopt;
  std::vector<double> values;
  const auto& samples = cell.value("samples", json::object());
  if (samples.contains(sample))
    for (const auto& v : samples[sample].value("values", json::array()))
      if (v.is_number() && std::isfinite(v.get<double>())) values.push_back(v.get<double>());
  if (!values.empty()) return median(values);
  const auto& metrics = cell.value("metrics", json::object());
  if (metrics.contains(metric)) {
    const auto& v = metrics[metric].value("value", json());
    if (v.is_number() && std::isfinite(v.get<double>())) return v.get<double>();
  }
  return std::nullopt;
}

std::string value_text(const std::optional<double>& v) {
  if (!v) return "&ndash;";
  const double a = std::fabs(*v);
  if (a >= 1000) return printf_text("%.0f", *v);
  if (a >= 10) return printf_text("%.1f", *v);
  return printf_text("%.3g", *v);
}

// ---- Trend charts (inline SVG) ----

struct Axis {
  double lo, hi, step;
};

// A "nice" axis (steps of 1, 2 or 5 times a power of ten, about four of them) covering [lo, hi].
Axis nice_axis(double lo, double hi) {
  if (!(hi > lo)) {
    const double pad = lo == 0 ? 1 : std::fabs(lo) * 0.05;
    lo -= pad, hi += pad;
  }
  const double raw = (hi - lo) / 4;
  const double magnitude = std::pow(10, std::floor(std::log10(raw)));
  const double norm = raw / magnitude;
  const double step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 5 ? 5 : 10) * magnitude;
  return {std::floor(lo / step) * step, std::ceil(hi / step) * step, step};
}

std::string tick_text(double v, double step) {
  const char* suffix = "";
  if (step >= 1e6)
    v /= 1e6, step /= 1e6, suffix = "M";
  else if (step >= 1e3)
    v /= 1e3, step /= 1e3, suffix = "k";
  const int decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  if (std::fabs(v) < step * 1e-9) v = 0;  // no "-0"
  return printf_text("%.*f%s", decimals, v, suffix);
}

// "2026-11-22T19:00:00Z" -> "11-22 19:00"; anything else as it is.
std::string short_time(const std::string& timestamp) {
  if (timestamp.size() >= 16 && timestamp[10] == 'T') return timestamp.substr(5, 5) + " " + timestamp.substr(11, 5);
  return timestamp;
}

struct ChartPoint {
  std::optional<double> y;
  std::string label;  // the run, for the tooltip and the x axis
};

std::string trend_chart(const std::string& title, const std::string& unit, const std::vector<ChartPoint>& points,
                        const char* stroke, bool latest_regressed) {
  constexpr double W = 560, H = 210, ml = 72, mr = 36, mt = 28, mb = 42;  // mr: room for the last x label
  const double pw = W - ml - mr, ph = H - mt - mb;
  std::string svg = printf_text(
      "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f "
      "%.0f\" role=\"img\" aria-label=\"",
      W, H, W, H);
  svg += e(title) + "\">";
  svg += printf_text("<text class=\"chart-title\" x=\"%.0f\" y=\"18\">", ml) + e(title) + "</text>";
  svg += printf_text("<rect class=\"plot\" x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"%s\"/>", ml, mt,
                     pw, ph, kChartPlotFill);

  std::vector<double> ys;
  for (const auto& p : points)
    if (p.y) ys.push_back(*p.y);
  if (ys.empty()) {
    svg += printf_text("<text class=\"no-data\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">no data</text>",
                       ml + pw / 2, mt + ph / 2);
    return svg + "</svg>";
  }
  const Axis axis = nice_axis(*std::min_element(ys.begin(), ys.end()), *std::max_element(ys.begin(), ys.end()));
  const size_t n = points.size();
  auto x_of = [&](size_t i) {
    return n == 1 ? ml + pw / 2 : ml + 10 + (pw - 20) * static_cast<double>(i) / static_cast<double>(n - 1);
  };
  auto y_of = [&](double v) { return mt + ph - ph * (v - axis.lo) / (axis.hi - axis.lo); };

  // y grid and ticks
  for (double t = axis.lo; t <= axis.hi + axis.step * 1e-6; t += axis.step) {
    const double y = y_of(t);
    svg += printf_text("<line class=\"grid\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", ml, y, ml + pw, y);
    svg += printf_text("<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%s</text>", ml - 6, y + 4,
                       tick_text(t, axis.step).c_str());
  }
  // x ticks: at most six labelled runs, always the first and the last
  const size_t label_every = std::max<size_t>(1, (n + 5) / 6);
  std::vector<size_t> labelled;
  for (size_t i = 0; i < n; i += label_every) labelled.push_back(i);
  if (labelled.back() != n - 1) {
    if (n - 1 - labelled.back() < (label_every + 1) / 2)
      labelled.back() = n - 1;  // too close: move it
    else
      labelled.push_back(n - 1);
  }
  for (size_t i : labelled) {
    const double x = x_of(i);
    svg += printf_text("<line class=\"axis\" x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>", x, mt + ph, x,
                       mt + ph + 4);
    svg += printf_text("<text class=\"tick\" x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x, mt + ph + 16) +
           e(points[i].label) + "</text>";
  }
  // axes and their titles
  svg += printf_text("<line class=\"axis\" x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\"/>", ml, mt, ml, mt + ph);
  svg += printf_text("<line class=\"axis\" x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\"/>", ml, mt + ph, ml + pw,
                     mt + ph);
  svg += printf_text("<text class=\"axis-title\" transform=\"translate(14 %.0f) rotate(-90)\" text-anchor=\"middle\">",
                     mt + ph / 2) +
         e(unit) + "</text>";
  svg += printf_text(
      "<text class=\"axis-title\" x=\"%.0f\" y=\"%.0f\" text-anchor=\"middle\">run (oldest to newest)</text>",
      ml + pw / 2, H - 6);

  // the line, broken where a run has no value
  std::string segment;
  size_t segment_points = 0;
  auto flush = [&] {
    if (segment_points >= 2)
      svg +=
          printf_text("<polyline class=\"trend\" fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" points=\"", stroke) +
          segment + "\"/>";
    segment.clear();
    segment_points = 0;
  };
  for (size_t i = 0; i < n; ++i) {
    if (!points[i].y) {
      flush();
      continue;
    }
    segment += printf_text("%s%.1f,%.1f", segment.empty() ? "" : " ", x_of(i), y_of(*points[i].y));
    ++segment_points;
  }
  flush();
  for (size_t i = 0; i < n; ++i) {
    if (!points[i].y) continue;
    const bool regressed = latest_regressed && i + 1 == n;
    svg += printf_text("<circle class=\"%s\" cx=\"%.1f\" cy=\"%.1f\" r=\"%s\" fill=\"%s\"><title>",
                       regressed ? "point regression-point" : "point", x_of(i), y_of(*points[i].y),
                       regressed ? "6" : "3.5", regressed ? "#d62728" : stroke) +
           e(points[i].label) + ": " + value_text(points[i].y) + " " + e(unit) + (regressed ? " (regression)" : "") +
           "</title></circle>";
  }
  return svg + "</svg>";
}

// ---- The latest document's matrix ----

using CellKey = std::pair<std::string, std::string>;  // (id, system)

CellKey key_of(const json& cell) { return {cell.value("id", std::string()), cell.value("system", std::string())}; }

// The PyTorch cell of `system` in `doc` that fsdpp `cell` compares against, by the bench
// matrix's rule (harness/bench/matrix.h, peer_matches): same model, mixed precision,
// activation checkpointing and device; pytorch_ddp and pytorch_fsdp2 also the same world
// size and batch per rank, pytorch_single the same global batch (one process trains all of it).
const json* peer_of(const json& doc, const json& cell, const std::string& system) {
  const auto& config = cell.value("config", json::object());
  std::vector<const char*> fields = {"model_type", "model_size", "mixed_precision", "activation_checkpointing",
                                     "device"};
  if (system == "pytorch_ddp" || system == "pytorch_fsdp2") {
    if (config.value("strategy", std::string()) == "unsharded") return nullptr;  // its peer is pytorch_single
    fields.insert(fields.end(), {"world_size", "batch_per_rank"});
  }
  if (system == "pytorch_single") fields.push_back("global_batch");
  for (const auto& other : cells_of(doc)) {
    if (other.value("system", std::string()) != system) continue;
    const auto& c = other.value("config", json::object());
    bool same = true;
    for (const char* field : fields) same = same && c.value(field, json()) == config.value(field, json());
    if (same) return &other;
  }
  return nullptr;
}

std::string ratio_cell(const MetricComparison* row) {
  if (row == nullptr) return "<td class=\"num\">&ndash;</td>";
  const std::string verdict = to_string(row->verdict);
  std::string text = row->ratio ? printf_text("%.3f&times;", *row->ratio) : verdict;
  if (row->verdict == Verdict::Regression) text += " <strong>REGRESSION</strong>";
  if (row->p) text += printf_text("<br><span class=\"p\">p=%.2g</span>", *row->p);
  std::string title = verdict;
  if (row->ratio_low) title += printf_text(", 95%% CI of the ratio [%.3f, %.3f]", *row->ratio_low, *row->ratio_high);
  if (!row->note.empty()) title += ", " + row->note;
  return "<td class=\"num verdict-" + verdict + "\" title=\"" + e(title) + "\">" + text + "</td>";
}

std::string peer_cell(const json& doc, const json& cell, const std::string& system) {
  if (cell.value("system", std::string()) != "fsdpp") return "<td class=\"num\">&ndash;</td>";
  const json* peer = peer_of(doc, cell, system);
  if (peer == nullptr) return "<td class=\"num\">&ndash;</td>";
  const auto mine = cell_value(cell, "tokens_per_s", "tokens_per_s");
  const auto theirs = cell_value(*peer, "tokens_per_s", "tokens_per_s");
  const std::string title = "tokens/s against " + peer->value("id", std::string());
  if (!mine || !theirs || *theirs <= 0)
    return "<td class=\"num\" title=\"" + e(title) + "\">" + e(peer->value("status", std::string())) + "</td>";
  return "<td class=\"num\" title=\"" + e(title) + "\">" + printf_text("%.3f&times;", *mine / *theirs) + "</td>";
}

const char* kStyle = R"css(
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 16px 24px; color: #1b1f24; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 22px 0 8px; } h3 { font-size: 14px; margin: 14px 0 4px; font-family: ui-monospace, monospace; }
.meta { color: #555; font-size: 13px; margin: 2px 0; }
.summary { font-size: 15px; padding: 8px 12px; border-radius: 6px; background: #eef4ea; display: inline-block; }
.summary.has-regression { background: #fde2e1; color: #8b0000; font-weight: 600; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #d0d7de; padding: 3px 8px; text-align: left; vertical-align: top; }
th { background: #f6f8fa; }
td.num { text-align: right; white-space: nowrap; font-variant-numeric: tabular-nums; }
td.id { font-family: ui-monospace, monospace; word-break: break-all; min-width: 16em; max-width: 30em; }
tr.regression td { background: #fde2e1; }
td.verdict-regression { background: #f8c9c6 !important; color: #8b0000; font-weight: 600; }
td.verdict-improvement { background: #dcf5dc; color: #145214; }
tr.failed td, tr.unavailable td { color: #777; }
tr.missing td { background: #fff4d6; }
.p { color: #666; font-size: 11px; }
.trends { display: flex; flex-wrap: wrap; gap: 8px 16px; }
.chart text { font-size: 11px; fill: #333; }
.chart .chart-title { font-size: 12px; font-weight: 600; }
.chart .axis { stroke: #555; stroke-width: 1; }
.chart .grid { stroke: #dde3ea; stroke-width: 1; }
.chart .no-data { fill: #888; }
body.only-problems tr.ok { display: none; }
)css";

const char* kScript = R"js(
(function () {
  var box = document.getElementById('only-problems');
  if (box) {
    box.addEventListener('change', function () {
      document.body.classList.toggle('only-problems', box.checked);
    });
  }
  document.body.setAttribute('data-ready', '1');
})();
)js";

}  // namespace

std::string html_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string render_dashboard(const std::vector<SourcedDocument>& history, const Comparison* comparison) {
  if (history.empty()) throw std::runtime_error("render_dashboard: no documents");
  const json& latest = history.back().doc;
  const json& machine = latest.value("machine", json::object());

  std::map<std::tuple<std::string, std::string, std::string>, const MetricComparison*> verdicts;
  if (comparison != nullptr)
    for (const auto& row : comparison->rows) verdicts[{row.cell_id, row.system, row.metric}] = &row;
  auto verdict_of = [&](const CellKey& key, const std::string& metric) -> const MetricComparison* {
    const auto it = verdicts.find({key.first, key.second, metric});
    return it == verdicts.end() ? nullptr : it->second;
  };

  std::string html =
      "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
      "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
      "<meta name=\"color-scheme\" content=\"light\"><link rel=\"icon\" href=\"data:,\">";
  html +=
      "<title>fsdpp results: " + e(str(machine, "hostname")) + "</title><style>" + kStyle + "</style></head><body>\n";
  html += "<h1>fsdpp benchmark results</h1>\n";
  html += "<p class=\"meta\">Machine <code>" + e(str(machine, "fingerprint")) +
          "</code>: " + e(str(machine, "hostname")) + ", " + e(str(machine, "cpu_model")) + " (" +
          e(str(machine, "cpu_cores")) + " cores), GPU " +
          e(str(machine, "gpu_model").empty() ? "none" : str(machine, "gpu_model")) + ", LibTorch " +
          e(str(machine, "libtorch")) + ", " + e(str(machine, "compiler")) + "</p>\n";
  std::string command;
  for (const auto& arg : latest.value("command", json::array()))
    command += (command.empty() ? "" : " ") + (arg.is_string() ? arg.get<std::string>() : arg.dump());
  html += "<p class=\"meta\">Latest run <code>" + e(str(latest, "run_id")) + "</code> at " +
          e(str(latest, "timestamp")) + ", commit <code>" + e(str(latest.value("git", json::object()), "commit")) +
          "</code>" + (latest.value("git", json::object()).value("dirty", json()) == json(true) ? " (dirty)" : "") +
          ", preset " + e(str(latest, "preset").empty() ? "none" : str(latest, "preset")) + ": <code>" + e(command) +
          "</code>; " + std::to_string(history.size()) + " document(s) in the history.</p>\n";

  // Summary against the baseline.
  if (comparison != nullptr) {
    const size_t regressions = comparison->count(Verdict::Regression);
    html += std::string("<p class=\"summary") + (regressions ? " has-regression" : "") + "\">" +
            std::to_string(regressions) + " regression(s), " + std::to_string(comparison->count(Verdict::Improvement)) +
            " improvement(s), " + std::to_string(comparison->count(Verdict::Missing)) + " missing, " +
            std::to_string(comparison->count(Verdict::New)) + " new against " +
            std::to_string(comparison->baseline_sources.size()) + " baseline document(s)" +
            printf_text(" (regression: Mann-Whitney p &lt; %g and the median %g%% or more worse)",
                        comparison->options.alpha, 100 * comparison->options.min_effect) +
            "</p>\n";
  } else {
    html += "<p class=\"summary\">No baseline: a single document and no --baseline.</p>\n";
  }

  // The latest matrix.
  html +=
      "<h2>Latest matrix</h2>\n<p class=\"meta\"><label><input type=\"checkbox\" id=\"only-problems\"> show only "
      "regressions, improvements and problems</label></p>\n";
  html +=
      "<table id=\"matrix\"><thead><tr><th>cell</th><th>system</th><th>ranks</th><th>dtype</th><th>status</th>"
      "<th>step ms<br>(median)</th><th>tokens/s<br>(median)</th><th>step ms<br>vs baseline</th>"
      "<th>tokens/s<br>vs baseline</th><th>tokens/s vs<br>pytorch_ddp</th><th>tokens/s vs<br>pytorch_single</th>"
      "<th>tokens/s vs<br>pytorch_fsdp2</th></tr>"
      "</thead><tbody>\n";
  std::set<CellKey> in_latest;
  for (const auto& cell : cells_of(latest)) {
    const CellKey key = key_of(cell);
    in_latest.insert(key);
    const std::string status = cell.value("status", std::string());
    const MetricComparison* step = verdict_of(key, "step_ms");
    const MetricComparison* tokens = verdict_of(key, "tokens_per_s");
    // The row's class: its worst verdict (regression before a failed status before the rest).
    std::set<Verdict> seen;
    if (comparison != nullptr)
      for (const auto& row : comparison->rows)
        if (row.cell_id == key.first && row.system == key.second) seen.insert(row.verdict);
    std::string row_class = "ok";
    if (seen.count(Verdict::Regression))
      row_class = "regression";
    else if (status != "ok")
      row_class = status;
    else if (seen.count(Verdict::Missing))
      row_class = "missing";
    else if (seen.count(Verdict::Improvement))
      row_class = "improvement";
    const auto& config = cell.value("config", json::object());
    std::string status_text = e(status);
    if (!cell.value("reason", std::string()).empty())
      status_text = "<span title=\"" + e(cell.value("reason", std::string())) + "\">" + status_text + "</span>";
    html += "<tr class=\"" + e(row_class) + "\"><td class=\"id\">" + e(key.first) + "</td><td>" + e(key.second) +
            "</td><td class=\"num\">" + e(str(config, "world_size")) + "</td><td>" + e(str(config, "mixed_precision")) +
            "</td><td>" + status_text + "</td><td class=\"num\">" +
            value_text(cell_value(cell, "step_ms", "step_ms_median")) + "</td><td class=\"num\">" +
            value_text(cell_value(cell, "tokens_per_s", "tokens_per_s")) + "</td>" + ratio_cell(step) +
            ratio_cell(tokens) + peer_cell(latest, cell, "pytorch_ddp") + peer_cell(latest, cell, "pytorch_single") +
            peer_cell(latest, cell, "pytorch_fsdp2") + "</tr>\n";
  }
  html += "</tbody></table>\n";

  // Every compared metric, as the gate sees it.
  if (comparison != nullptr) {
    html +=
        "<details><summary>All compared metrics (" + std::to_string(comparison->rows.size()) +
        ", regressions first)</summary>\n<table id=\"compare\"><thead><tr><th>cell</th><th>system</th><th>metric</th>"
        "<th>baseline median</th><th>new median</th><th>ratio</th><th>p</th><th>verdict</th></tr></thead><tbody>\n";
    for (const auto& row : comparison->rows) {
      const std::string verdict = to_string(row.verdict);
      html += "<tr class=\"" + std::string(row.verdict == Verdict::Unchanged ? "ok" : verdict) +
              "\"><td class=\"id\">" + e(row.cell_id) + "</td><td>" + e(row.system) + "</td><td>" + e(row.metric) +
              " [" + e(row.unit) + "]</td><td class=\"num\">" + value_text(row.baseline_median) +
              "</td><td class=\"num\">" + value_text(row.new_median) + "</td>" + ratio_cell(&row) +
              "<td class=\"num\">" + (row.p ? printf_text("%.3g", *row.p) : std::string("&ndash;")) +
              "</td><td class=\"verdict-" + verdict + "\">" + e(verdict) +
              (row.note.empty() ? "" : " (" + e(row.note) + ")") + "</td></tr>\n";
    }
    html += "</tbody></table></details>\n";
  }

  // Trend charts: the latest document's cells first, then cells only older documents have.
  std::vector<CellKey> order;
  for (const auto& cell : cells_of(latest)) order.push_back(key_of(cell));
  for (auto it = history.rbegin(); it != history.rend(); ++it)
    for (const auto& cell : cells_of(it->doc))
      if (std::find(order.begin(), order.end(), key_of(cell)) == order.end()) order.push_back(key_of(cell));
  html += "<h2>Trends over " + std::to_string(history.size()) + " run(s)</h2>\n";
  for (const auto& key : order) {
    std::vector<ChartPoint> tokens, step;
    for (const auto& sourced : history) {
      const std::string label = short_time(str(sourced.doc, "timestamp"));
      const json* found = nullptr;
      for (const auto& cell : cells_of(sourced.doc))
        if (key_of(cell) == key) found = &cell;
      tokens.push_back({found ? cell_value(*found, "tokens_per_s", "tokens_per_s") : std::nullopt, label});
      step.push_back({found ? cell_value(*found, "step_ms", "step_ms_median") : std::nullopt, label});
    }
    auto regressed = [&](const char* metric) {
      const MetricComparison* row = verdict_of(key, metric);
      return row != nullptr && row->verdict == Verdict::Regression;
    };
    html += "<section class=\"cell-trend\"><h3>" + e(key.first) + " <span class=\"meta\">(" + e(key.second) +
            (in_latest.count(key) ? "" : ", not in the latest run") + ")</span></h3><div class=\"trends\">" +
            trend_chart("tokens/s (median)", "tokens/s", tokens, kTokensChartStroke, regressed("tokens_per_s")) +
            trend_chart("step time (median)", "ms", step, kStepChartStroke, regressed("step_ms")) +
            "</div></section>\n";
  }

  // The documents.
  html +=
      "<h2>History</h2>\n<table id=\"history\"><thead><tr><th>run</th><th>timestamp</th><th>commit</th><th>preset"
      "</th><th>cells</th></tr></thead><tbody>\n";
  for (auto it = history.rbegin(); it != history.rend(); ++it)
    html += "<tr><td class=\"id\">" + e(str(it->doc, "run_id")) + "</td><td>" + e(str(it->doc, "timestamp")) +
            "</td><td class=\"id\">" + e(str(it->doc.value("git", json::object()), "commit")) + "</td><td>" +
            e(str(it->doc, "preset")) + "</td><td class=\"num\">" + std::to_string(cells_of(it->doc).size()) +
            "</td></tr>\n";
  html += "</tbody></table>\n";
  html += std::string("<script>") + kScript + "</script>\n</body></html>\n";
  return html;
}

std::string build_dashboard(const DashboardOptions& options) {
  const fs::path& dir = options.history_dir;
  if (!fs::is_directory(dir)) throw std::runtime_error(dir.string() + ": not a history directory");
  std::string machine = options.machine;
  std::vector<json> docs;
  if (!machine.empty()) {
    docs = load_history(dir, machine);
  } else {
    // The machine whose newest document is the newest of all.
    std::string newest;
    std::vector<fs::path> machines;
    for (const auto& entry : fs::directory_iterator(dir))
      if (entry.is_directory()) machines.push_back(entry.path());
    std::sort(machines.begin(), machines.end());
    for (const auto& path : machines) {
      auto candidate = load_history(dir, path.filename().string());
      if (candidate.empty()) continue;
      const std::string stamp = str(candidate.back(), "timestamp") + str(candidate.back(), "run_id");
      if (docs.empty() || stamp > newest)
        newest = stamp, docs = std::move(candidate), machine = path.filename().string();
    }
  }
  if (docs.empty())
    throw std::runtime_error(dir.string() + ": no history documents" +
                             (machine.empty() ? "" : " for machine " + machine));

  std::vector<SourcedDocument> history;
  for (auto& doc : docs) {
    const std::string run_id = str(doc, "run_id");
    history.push_back({std::move(doc), (dir / machine / (run_id + ".json")).string()});
  }
  std::optional<Comparison> comparison;
  if (!options.baseline_file.empty()) {
    SourcedDocument baseline{load_results(options.baseline_file), options.baseline_file.string()};
    comparison = compare_documents(history.back(), {baseline}, options.compare);
  } else if (history.size() > 1) {
    const size_t first = history.size() - 1 > options.window ? history.size() - 1 - options.window : 0;
    std::vector<SourcedDocument> window(history.begin() + static_cast<std::ptrdiff_t>(first), history.end() - 1);
    comparison = compare_documents(history.back(), window, options.compare);
  }
  return render_dashboard(history, comparison ? &*comparison : nullptr);
}

}  // namespace fsdpp::results
