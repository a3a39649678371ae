#include "harness/results/op_profile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <set>
#include <stdexcept>

#include "harness/bench/step_profiler.h"
#include "harness/results/printf_text.h"

namespace fsdpp::results {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Markdown cells must not contain a bar; kernel names are long, so shorten the middle.
std::string cell_text(const std::string& name) {
  std::string s;
  for (char c : name) s += (c == '|') ? '/' : c;
  if (s.size() > 90) s = s.substr(0, 60) + "..." + s.substr(s.size() - 27);
  return "`" + s + "`";
}

}  // namespace

OpProfile read_op_profile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path + ": cannot read the profile trace");
  nlohmann::json trace;
  try {
    trace = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path + ": not a JSON Chrome trace: " + e.what());
  }
  // Kineto's traces are an object holding traceEvents; PyTorch's profiler without Kineto
  // (Debian's 1.13) writes the bare array of CPU operators, with no categories.
  const bool bare = trace.is_array();
  if (!bare && !(trace.is_object() && trace.contains("traceEvents") && trace["traceEvents"].is_array()))
    throw std::runtime_error(path + ": not a Chrome trace (expected a traceEvents array)");
  const auto& events = bare ? trace : trace["traceEvents"];

  OpProfile profile;
  profile.source = path;
  std::map<std::pair<std::string, std::string>, OpTotal> totals;
  for (const auto& event : events) {
    if (!event.is_object() || event.value("ph", "") != "X" || !event.contains("dur") || !event["dur"].is_number())
      continue;
    const std::string name = event.value("name", "");
    std::string category = lower(event.value("cat", ""));
    if (category.empty()) category = name == harness::kStepScope ? "user_annotation" : "cpu_op";
    const double us = event["dur"].get<double>();
    if (category == "user_annotation" && name == harness::kStepScope) {
      ++profile.steps;
      profile.steps_us += us;
      continue;
    }
    profile.category_us[category] += us;
    auto& t = totals[{category, name}];
    t.category = category;
    t.name = name;
    ++t.count;
    t.total_us += us;
  }
  if (profile.steps == 0)
    throw std::runtime_error(path + ": no '" + std::string(harness::kStepScope) +
                             "' annotation: not a trace of fsdpp bench-step or torch_peer.py --profile-trace");
  for (auto& [key, total] : totals) profile.ops.push_back(std::move(total));
  std::sort(profile.ops.begin(), profile.ops.end(),
            [](const OpTotal& a, const OpTotal& b) { return a.total_us > b.total_us; });
  return profile;
}

std::string default_profile_category(const std::vector<OpProfile>& profiles) {
  for (const auto& p : profiles)
    if (p.category_us.count("kernel")) return "kernel";
  return "cpu_op";
}

namespace {

// "| first | [1] unit | [2] unit | [2]/[1] |" and the alignment row, for n profiles.
std::string table_head(const std::string& first, size_t n, const std::string& unit) {
  std::string head = "| " + first + " |", rule = "|---|";
  for (size_t i = 0; i < n; ++i) head += " [" + std::to_string(i + 1) + "] " + unit + " |";
  for (size_t i = 1; i < n; ++i) head += " [" + std::to_string(i + 1) + "]/[1] |";
  for (size_t i = 0; i < 2 * n - 1; ++i) rule += "---:|";
  return head + "\n" + rule + "\n";
}

// One row: each profile's `shown` text, then each profile's value over the first's.
std::string table_row(const std::string& label, const std::vector<std::string>& shown,
                      const std::vector<double>& values) {
  std::string row = "| " + label + " |";
  for (const auto& text : shown) row += " " + text + " |";
  for (size_t i = 1; i < values.size(); ++i)
    row += " " + (values[0] > 0 ? printf_text("%.2f", values[i] / values[0]) : std::string("-")) + " |";
  return row + "\n";
}

std::vector<std::string> formatted(const std::vector<double>& values) {
  std::vector<std::string> shown;
  shown.reserve(values.size());
  for (double v : values) shown.push_back(printf_text("%.2f", v));
  return shown;
}

}  // namespace

std::string profile_table(const std::vector<OpProfile>& profiles, const std::string& category, int top) {
  if (profiles.empty()) throw std::invalid_argument("profile_table: no profile");
  const size_t n = profiles.size();
  auto per_step_ms = [](const OpProfile& p, double us) { return us / 1e3 / p.steps; };
  std::string out = table_head("", n, "ms/step");

  std::vector<double> steps;
  steps.reserve(profiles.size());
  for (const auto& p : profiles) steps.push_back(per_step_ms(p, p.steps_us));
  out += table_row("step (" + std::string(harness::kStepScope) + ")", formatted(steps), steps);
  std::set<std::string> categories;
  for (const auto& p : profiles)
    for (const auto& [c, us] : p.category_us) categories.insert(c);
  for (const auto& c : categories) {
    std::vector<double> values;
    for (const auto& p : profiles) {
      auto it = p.category_us.find(c);
      values.push_back(it == p.category_us.end() ? 0.0 : per_step_ms(p, it->second));
    }
    out += table_row("all " + c, formatted(values), values);
  }

  // The names with the most time per step in any profile.
  std::map<std::string, std::vector<double>> ms, calls;
  for (size_t i = 0; i < n; ++i)
    for (const auto& op : profiles[i].ops) {
      if (op.category != category) continue;
      auto& m = ms[op.name];
      auto& k = calls[op.name];
      m.resize(n, 0.0);
      k.resize(n, 0.0);
      m[i] = per_step_ms(profiles[i], op.total_us);
      k[i] = static_cast<double>(op.count) / profiles[i].steps;
    }
  std::vector<std::string> names;
  names.reserve(ms.size());
  for (const auto& [name, values] : ms) names.push_back(name);
  auto largest = [&](const std::string& name) { return *std::max_element(ms[name].begin(), ms[name].end()); };
  std::sort(names.begin(), names.end(), [&](const auto& a, const auto& b) { return largest(a) > largest(b); });
  if (static_cast<int>(names.size()) > top) names.resize(static_cast<size_t>(top));

  out += "\nTop " + std::to_string(names.size()) + " " + category + " names by time per step:\n\n";
  out += table_head(category, n, "ms/step (calls)");
  for (const auto& name : names) {
    std::vector<std::string> shown;
    for (size_t i = 0; i < n; ++i)
      shown.push_back(printf_text("%.3f", ms[name][i]) + " (" + printf_text("%.0f", calls[name][i]) + ")");
    out += table_row(cell_text(name), shown, ms[name]);
  }
  out += "\n";
  for (size_t i = 0; i < n; ++i)
    out +=
        "[" + std::to_string(i + 1) + "] " + profiles[i].source + ": " + std::to_string(profiles[i].steps) + " steps\n";
  return out;
}

}  // namespace fsdpp::results
