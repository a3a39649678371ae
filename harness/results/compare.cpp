#include "harness/results/compare.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "harness/results/results_document.h"
#include "harness/results/stats.h"

namespace fsdpp::results {
namespace {

using nlohmann::json;
using CellKey = std::pair<std::string, std::string>;  // (id, system)

struct MetricSamples {
  std::string unit, better;
  std::vector<double> values;       // finite values only
  std::vector<double> run_medians;  // one per document that had some: its own median
};

struct CellSamples {
  bool present = false;  // some document has the cell
  bool ok = false;       // some document has it with status "ok"
  std::string status, reason;
  std::map<std::string, MetricSamples> metrics;
};

// object[key] when it is of the wanted kind, else an empty one (a reference: callers keep
// pointers into documents, which json::value() would copy).
const json& member(const json& object, const char* key, json::value_t kind) {
  static const json empty_object = json::object(), empty_array = json::array();
  if (object.is_object()) {
    const auto it = object.find(key);
    if (it != object.end() && it->type() == kind) return *it;
  }
  return kind == json::value_t::array ? empty_array : empty_object;
}

std::string fingerprint_of(const json& doc) {
  const auto& machine = member(doc, "machine", json::value_t::object);
  const auto it = machine.find("fingerprint");
  return it != machine.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// Adds the ok cells' finite samples of `doc` into `pool`; `order` receives keys in first-seen order.
void pool_cells(const SourcedDocument& source, std::map<CellKey, CellSamples>* pool, std::vector<CellKey>* order) {
  for (const auto& cell : member(source.doc, "cells", json::value_t::array)) {
    CellKey key{cell.value("id", std::string()), cell.value("system", std::string())};
    auto [it, inserted] = pool->try_emplace(key);
    if (inserted) order->push_back(key);
    CellSamples& samples = it->second;
    samples.present = true;
    samples.status = cell.value("status", std::string());
    samples.reason = cell.value("reason", std::string());
    if (samples.status != "ok") continue;
    samples.ok = true;
    for (const auto& [name, metric] : member(cell, "samples", json::value_t::object).items()) {
      MetricSamples& into = samples.metrics[name];
      const std::string unit = metric.value("unit", std::string());
      const std::string better = metric.value("better", std::string("none"));
      if (!into.values.empty() && (into.unit != unit || into.better != better))
        throw std::runtime_error(source.source + ": cell " + key.first + " samples." + name + " has unit '" + unit +
                                 "', better '" + better + "' but another document has '" + into.unit + "', '" +
                                 into.better + "'");
      into.unit = unit;
      into.better = better;
      const size_t first = into.values.size();
      for (const auto& v : member(metric, "values", json::value_t::array))
        if (v.is_number() && std::isfinite(v.get<double>())) into.values.push_back(v.get<double>());
      if (into.values.size() > first)
        into.run_medians.push_back(median(std::vector<double>(into.values.begin() + first, into.values.end())));
    }
  }
}

int verdict_rank(Verdict v) {
  switch (v) {
    case Verdict::Regression: return 0;
    case Verdict::Improvement: return 1;
    case Verdict::Missing: return 2;
    case Verdict::New: return 3;
    case Verdict::Unchanged: return 4;
  }
  return 5;
}

// Regressions first, then improvements, missing, new, unchanged; order kept within each.
void sort_by_verdict(std::vector<MetricComparison>& rows) {
  std::stable_sort(rows.begin(), rows.end(), [](const MetricComparison& a, const MetricComparison& b) {
    return verdict_rank(a.verdict) < verdict_rank(b.verdict);
  });
}

// See MetricComparison::baseline_run_spread.
std::optional<double> run_spread(const std::vector<double>& run_medians) {
  if (run_medians.size() < 2) return std::nullopt;
  const double center = median(run_medians);
  if (!(center > 0)) return std::nullopt;
  std::vector<double> distance;
  for (double m : run_medians) distance.push_back(std::fabs(m / center - 1));
  std::sort(distance.begin(), distance.end());
  if (distance.size() >= 4) distance.pop_back();  // one run taken under load must not blind the gate
  return distance.back();
}

std::string percent(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * fraction);
  return buf;
}

void test_metric(const MetricSamples& base, const MetricSamples& now, const CompareOptions& options,
                 MetricComparison* row) {
  row->baseline_median = median(base.values);
  row->new_median = median(now.values);
  const auto mw = mann_whitney_u(now.values, base.values);
  row->p = mw.p;
  row->p_exact = mw.exact;
  const bool positive = std::all_of(base.values.begin(), base.values.end(), [](double v) { return v > 0; });
  if (!positive) {
    row->note = "baseline has values <= 0: no ratio";
    return;
  }
  const auto ci =
      bootstrap_median_ratio(now.values, base.values, options.ci_confidence, options.ci_resamples, options.ci_seed);
  row->ratio = ci.ratio;
  row->ratio_low = ci.low;
  row->ratio_high = ci.high;
  row->baseline_run_spread = run_spread(base.run_medians);
  row->min_effect_applied = std::max(options.min_effect, row->baseline_run_spread.value_or(0.0));
  // A metric without a direction (better: none) is never judged, whatever the minimum effect.
  if (row->better != "lower" && row->better != "higher") return;
  // How much worse the median got (negative: better), relative to the baseline median.
  const double worse_by = row->better == "lower" ? ci.ratio - 1 : 1 - ci.ratio;
  const bool significant = mw.p < options.alpha;
  if (significant && worse_by >= row->min_effect_applied) row->verdict = Verdict::Regression;
  if (significant && -worse_by >= row->min_effect_applied) row->verdict = Verdict::Improvement;
  if (significant && row->verdict == Verdict::Unchanged && std::fabs(worse_by) >= options.min_effect)
    row->note = std::string(worse_by > 0 ? "worse" : "better") + " by " + percent(std::fabs(worse_by)) +
                ", within the " + percent(*row->baseline_run_spread) + " the baseline's own runs differ by";
}

std::string number(const std::optional<double>& v) {
  if (!v) return "-";
  char buf[64];
  const double a = std::fabs(*v);
  if (a >= 100)
    std::snprintf(buf, sizeof buf, "%.1f", *v);
  else if (a >= 1)
    std::snprintf(buf, sizeof buf, "%.3f", *v);
  else
    std::snprintf(buf, sizeof buf, "%.4g", *v);
  return buf;
}

std::string markdown_cell(std::string text) {
  std::string out;
  for (char c : text) {
    if (c == '|')
      out += "\\|";
    else if (c == '\n' || c == '\r')
      out += ' ';
    else
      out += c;
  }
  return out;
}

json optional_json(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

}  // namespace

const char* to_string(Verdict verdict) {
  switch (verdict) {
    case Verdict::Regression: return "regression";
    case Verdict::Improvement: return "improvement";
    case Verdict::Unchanged: return "unchanged";
    case Verdict::Missing: return "missing";
    case Verdict::New: return "new";
  }
  return "?";
}

size_t Comparison::count(Verdict verdict) const {
  return static_cast<size_t>(
      std::count_if(rows.begin(), rows.end(), [&](const MetricComparison& r) { return r.verdict == verdict; }));
}

Comparison compare_documents(const SourcedDocument& current, const std::vector<SourcedDocument>& baseline,
                             const CompareOptions& options) {
  if (baseline.empty()) throw std::runtime_error(current.source + ": no baseline document to compare against");
  if (!(options.alpha > 0 && options.alpha < 1)) throw std::runtime_error("--alpha must be in (0, 1)");
  if (!(options.min_effect >= 0)) throw std::runtime_error("--min-effect must be >= 0");
  const std::string fingerprint = fingerprint_of(current.doc);
  Comparison comparison;
  comparison.current = current;
  comparison.options = options;

  std::map<CellKey, CellSamples> base_pool, current_pool;
  std::vector<CellKey> base_order, order;
  for (const auto& doc : baseline) {
    const std::string other = fingerprint_of(doc.doc);
    if (other != fingerprint && !options.allow_other_machine)
      throw std::runtime_error(doc.source + ": machine fingerprint " + other + " differs from " + current.source +
                               "'s " + fingerprint +
                               " (timings from different machines are not comparable; "
                               "--allow-other-machine compares anyway)");
    comparison.baseline_sources.push_back(doc.source);
    comparison.baseline_run_ids.push_back(doc.doc.value("run_id", std::string()));
    comparison.baseline_fingerprints.push_back(other);
    pool_cells(doc, &base_pool, &base_order);
  }
  pool_cells(current, &current_pool, &order);
  for (const auto& key : base_order)
    if (!current_pool.count(key)) order.push_back(key);

  std::vector<MetricComparison> rows;
  for (const auto& key : order) {
    const CellSamples empty;
    const auto b = base_pool.find(key);
    const auto c = current_pool.find(key);
    const CellSamples& base = b == base_pool.end() ? empty : b->second;
    const CellSamples& now = c == current_pool.end() ? empty : c->second;
    std::map<std::string, int> names;
    for (const auto& [name, m] : base.metrics) names[name] |= m.values.empty() ? 0 : 1;
    for (const auto& [name, m] : now.metrics) names[name] |= m.values.empty() ? 0 : 2;
    for (const auto& [name, sides] : names) {
      if (sides == 0) continue;
      MetricComparison row;
      row.cell_id = key.first;
      row.system = key.second;
      row.metric = name;
      if (sides & 2) {
        const auto& m = now.metrics.at(name);
        row.unit = m.unit, row.better = m.better, row.new_n = m.values.size(), row.new_median = median(m.values);
      }
      if (sides & 1) {
        const auto& m = base.metrics.at(name);
        if ((sides & 2) && (m.unit != row.unit || m.better != row.better))
          throw std::runtime_error(current.source + ": cell " + key.first + " samples." + name + " has unit '" +
                                   row.unit + "', better '" + row.better + "' but the baseline has '" + m.unit +
                                   "', '" + m.better + "'");
        row.unit = m.unit, row.better = m.better, row.baseline_n = m.values.size(),
        row.baseline_median = median(m.values);
      }
      if (sides == 3) {
        test_metric(base.metrics.at(name), now.metrics.at(name), options, &row);
      } else if (sides == 1) {
        row.verdict = Verdict::Missing;
        if (!now.present)
          row.note = "cell not in the new document";
        else if (!now.ok)
          row.note = "new document: status " + now.status + (now.reason.empty() ? "" : ": " + now.reason);
        else
          row.note = "no samples in the new document";
      } else {
        row.verdict = Verdict::New;
        if (!base.present)
          row.note = "cell not in the baseline";
        else if (!base.ok)
          row.note = "baseline: status " + base.status + (base.reason.empty() ? "" : ": " + base.reason);
        else
          row.note = "no samples in the baseline";
      }
      rows.push_back(std::move(row));
    }
  }
  sort_by_verdict(rows);
  comparison.rows = std::move(rows);
  return comparison;
}

void confirm_regressions(Comparison& first, const Comparison& rerun) {
  std::map<std::tuple<std::string, std::string, std::string>, const MetricComparison*> again;
  std::set<std::pair<std::string, std::string>> rerun_cells;
  for (const auto& r : rerun.rows) {
    again[{r.cell_id, r.system, r.metric}] = &r;
    if (r.new_n > 0) rerun_cells.insert({r.cell_id, r.system});
  }
  for (auto& row : first.rows) {
    if (row.verdict != Verdict::Regression) continue;
    if (!rerun_cells.count({row.cell_id, row.system})) {
      row.note = "not rerun: stands unconfirmed";
      continue;
    }
    const auto it = again.find({row.cell_id, row.system, row.metric});
    const MetricComparison* rerun_row = it == again.end() ? nullptr : it->second;
    const std::string numbers = "(ratio " + number(rerun_row ? rerun_row->ratio : std::nullopt) + ", p " +
                                number(rerun_row ? rerun_row->p : std::nullopt) + ")";
    if (rerun_row && rerun_row->verdict == Verdict::Regression) {
      row.note = "confirmed by the rerun " + numbers;
    } else {
      row.verdict = Verdict::Unchanged;
      row.note = "regressed, not confirmed by the rerun " + numbers;
    }
  }
  sort_by_verdict(first.rows);
  first.confirmation_sources.push_back(rerun.current.source);
}

std::string regressed_cells_filter(const Comparison& comparison) {
  std::vector<std::string> ids;
  for (const auto& r : comparison.rows)
    if (r.verdict == Verdict::Regression && std::find(ids.begin(), ids.end(), r.cell_id) == ids.end())
      ids.push_back(r.cell_id);
  if (ids.empty()) return "";
  std::string out = "^(";
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out += '|';
    for (char c : ids[i]) {
      if (std::strchr(".^$|()[]{}*+?\\", c) != nullptr) out += '\\';
      out += c;
    }
  }
  return out + ")$";
}

std::vector<SourcedDocument> history_baseline(const std::filesystem::path& history_dir, const json& current,
                                              size_t window) {
  if (window == 0) throw std::runtime_error("--window must be >= 1");
  const std::string fingerprint = fingerprint_of(current);
  const std::string run_id = current.value("run_id", std::string());
  std::vector<SourcedDocument> docs;
  for (auto& doc : load_history(history_dir, fingerprint)) {
    const std::string id = doc.value("run_id", std::string());
    if (id == run_id) continue;
    docs.push_back({std::move(doc), (history_dir / fingerprint / (id + ".json")).string()});
  }
  if (docs.empty())
    throw std::runtime_error(history_dir.string() + ": no history documents for machine fingerprint " + fingerprint +
                             " (other than the new document)");
  if (docs.size() > window) docs.erase(docs.begin(), docs.end() - static_cast<std::ptrdiff_t>(window));
  return docs;
}

std::string to_markdown(const Comparison& comparison) {
  const auto& o = comparison.options;
  std::string out;
  char line[512];
  std::snprintf(line, sizeof line,
                "**%s** against %zu baseline document(s): %zu regression(s), %zu improvement(s), %zu missing, %zu "
                "new, %zu unchanged (regression: Mann-Whitney p < %g and median %g%% or more worse, or more than "
                "the baseline's runs differ by when that is larger)\n\n",
                markdown_cell(comparison.current.source).c_str(), comparison.baseline_sources.size(),
                comparison.count(Verdict::Regression), comparison.count(Verdict::Improvement),
                comparison.count(Verdict::Missing), comparison.count(Verdict::New),
                comparison.count(Verdict::Unchanged), o.alpha, 100 * o.min_effect);
  out += line;
  for (const auto& source : comparison.confirmation_sources) {
    std::snprintf(line, sizeof line, " regressed too (p < %g, median %g%% or more worse).\n\n", o.confirm_alpha,
                  100 * o.min_effect);
    out += "Regressions were rerun: each stands only if " + markdown_cell(source) + line;
  }
  std::snprintf(line, sizeof line, "| cell | metric | baseline median | new median | ratio [%g%% CI] | p | verdict |\n",
                100 * o.ci_confidence);
  out += line;
  out += "| --- | --- | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& r : comparison.rows) {
    std::string cell = "`" + markdown_cell(r.cell_id) + "`";
    if (!r.system.empty()) cell += " (" + markdown_cell(r.system) + ")";
    std::string metric = markdown_cell(r.metric) + (r.unit.empty() ? "" : " [" + markdown_cell(r.unit) + "]");
    auto fixed3 = [](const std::optional<double>& v) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3f", v.value_or(0));
      return v ? std::string(buf) : std::string("-");
    };
    std::string ratio = fixed3(r.ratio);
    if (r.ratio_low) ratio += " [" + fixed3(r.ratio_low) + ", " + fixed3(r.ratio_high) + "]";
    std::string p = "-";
    if (r.p) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.3g", *r.p);
      p = buf;
    }
    std::string verdict = to_string(r.verdict);
    if (r.verdict == Verdict::Regression) verdict = "**REGRESSION**";
    if (!r.note.empty()) verdict += " (" + markdown_cell(r.note) + ")";
    out += "| " + cell + " | " + metric + " | " + number(r.baseline_median) + " (n=" + std::to_string(r.baseline_n) +
           ") | " + number(r.new_median) + " (n=" + std::to_string(r.new_n) + ") | " + ratio + " | " + p + " | " +
           verdict + " |\n";
  }
  return out;
}

json to_json(const Comparison& comparison) {
  const auto& o = comparison.options;
  json rows = json::array();
  for (const auto& r : comparison.rows) {
    rows.push_back({
        {"cell", r.cell_id},
        {"system", r.system},
        {"metric", r.metric},
        {"unit", r.unit},
        {"better", r.better},
        {"baseline_n", r.baseline_n},
        {"new_n", r.new_n},
        {"baseline_median", optional_json(r.baseline_median)},
        {"new_median", optional_json(r.new_median)},
        {"ratio", optional_json(r.ratio)},
        {"ratio_ci", r.ratio_low ? json::array({*r.ratio_low, *r.ratio_high}) : json(nullptr)},
        {"p", optional_json(r.p)},
        {"p_method", r.p ? json(r.p_exact ? "exact" : "normal") : json(nullptr)},
        {"baseline_run_spread", optional_json(r.baseline_run_spread)},
        {"min_effect_applied", optional_json(r.min_effect_applied)},
        {"verdict", to_string(r.verdict)},
        {"note", r.note},
    });
  }
  json summary = json::object();
  for (auto v : {Verdict::Regression, Verdict::Improvement, Verdict::Missing, Verdict::New, Verdict::Unchanged})
    summary[to_string(v)] = comparison.count(v);
  return {
      {"format", "fsdpp.compare"},
      {"version", 1},
      {"new",
       {{"source", comparison.current.source},
        {"run_id", comparison.current.doc.value("run_id", std::string())},
        {"fingerprint", fingerprint_of(comparison.current.doc)}}},
      {"baseline",
       {{"sources", comparison.baseline_sources},
        {"run_ids", comparison.baseline_run_ids},
        {"fingerprints", comparison.baseline_fingerprints}}},
      {"options",
       {{"alpha", o.alpha},
        {"confirm_alpha", o.confirm_alpha},
        {"min_effect", o.min_effect},
        {"allow_other_machine", o.allow_other_machine},
        {"ci_confidence", o.ci_confidence},
        {"ci_resamples", o.ci_resamples},
        {"ci_seed", o.ci_seed}}},
      {"summary", summary},
      {"regression", comparison.has_regression()},
      {"confirmed_by", comparison.confirmation_sources},
      {"rows", rows},
  };
}

}  // namespace fsdpp::results
