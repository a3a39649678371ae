#include "harness/cli/results_commands.h"

#include <cstdio>
#include <stdexcept>

#include "core/io/atomic_file.h"
#include "harness/results/dashboard.h"
#include "harness/results/op_profile.h"
#include "harness/results/results_document.h"

namespace fsdpp::cli {
namespace {

// One line: newlines in a message would split it.
void print_error(const std::exception& error) {
  std::string line = error.what();
  for (char& c : line)
    if (c == '\n' || c == '\r') c = ' ';
  std::fprintf(stderr, "fsdpp: error: %s\n", line.c_str());
}

void add_gate_flags(CLI::App& command, results::CompareOptions& options) {
  command.add_option("--alpha", options.alpha, "Mann-Whitney significance level (default 0.01)")
      ->check(CLI::Range(1e-12, 0.5));
  command
      .add_option("--min-effect", options.min_effect,
                  "Smallest relative move of a median that can regress (default 0.05 = 5%); with 2+ "
                  "baseline runs it must also exceed how far those runs differ (results/README.md)")
      ->check(CLI::Range(0.0, 10.0));
  command.add_flag("--allow-other-machine", options.allow_other_machine,
                   "Compare against documents from another machine fingerprint");
}

}  // namespace

void ResultsCommands::add_to(CLI::App& app) {
  group_ = app.add_subcommand(
      "results", "Benchmark results documents: validate, compare (regression gate), dashboard; profile traces");
  group_->require_subcommand(1);

  validate_ =
      group_->add_subcommand("validate", "Check fsdpp.results documents against the schema (results/README.md)");
  validate_->add_option("files", files_, "Documents")->required();

  compare_ = group_->add_subcommand(
      "compare",
      "Regression gate: the new document against a baseline document or a window of history (exit 1 on a regression)");
  compare_->add_option("new", file_, "The new document")->required();
  auto* baseline = compare_->add_option("--baseline", baseline_, "One baseline document");
  auto* history = compare_->add_option("--history", history_,
                                       "History directory: pool the last --window documents of this machine");
  baseline->excludes(history);
  history->excludes(baseline);
  compare_->add_option("--window", window_, "Documents of history to pool (default 5)")->check(CLI::Range(1, 10000));
  add_gate_flags(*compare_, options_);
  compare_->add_option("--markdown", markdown_, "Also write the Markdown table here");
  compare_->add_option("--json", json_, "Also write the fsdpp.compare JSON report here");
  compare_->add_option("--confirm", confirm_,
                       "A rerun of the regressed cells (ci/gate.sh): a regression stands only if it regresses too");
  compare_
      ->add_option("--confirm-alpha", options_.confirm_alpha,
                   "Level of the rerun's test when it confirms a regression (default 0.1)")
      ->check(CLI::Range(0.0, 1.0));
  compare_->add_option("--regressed-filter", regressed_filter_,
                       "Write the fsdpp bench --filter regex of the regressed cells here (empty: none)");

  dashboard_ =
      group_->add_subcommand("dashboard", "Write one self-contained HTML page: history trends and the latest matrix");
  dashboard_->add_option("--history", history_, "History directory (<dir>/<fingerprint>/<run_id>.json)")->required();
  dashboard_->add_option("--baseline", baseline_,
                         "Compare the latest document with this one (default: the --window before it)");
  dashboard_->add_option("--machine", machine_, "Machine fingerprint (default: the machine with the newest document)");
  dashboard_->add_option("--window", window_, "Documents before the latest to pool as its baseline (default 5)")
      ->check(CLI::Range(1, 10000));
  add_gate_flags(*dashboard_, options_);
  dashboard_->add_option("--out", out_, "The HTML file to write")->required();

  append_ = group_->add_subcommand("append", "Store a document in the history as <dir>/<fingerprint>/<run_id>.json");
  append_->add_option("file", file_, "The document")->required();
  append_->add_option("--history", history_, "History directory")->required();

  profile_ = group_->add_subcommand(
      "profile",
      "Where profiled steps spend their time: --profile-trace Chrome traces side by side, per step (Markdown)");
  profile_
      ->add_option("traces", files_,
                   "Traces of fsdpp bench-step or torch_peer.py --profile-trace; ratios are to the first")
      ->required();
  profile_->add_option("--category", category_, "Event category to list by name (default: kernel if any, else cpu_op)");
  profile_->add_option("--top", top_, "Names listed (default 30)")->check(CLI::Range(1, 100000));
}

bool ResultsCommands::parsed() const { return group_ != nullptr && group_->parsed(); }

int ResultsCommands::run(const std::vector<std::string>& /*argv*/) {
  try {
    if (validate_->parsed()) return validate();
    if (compare_->parsed()) return compare();
    if (dashboard_->parsed()) return dashboard();
    if (append_->parsed()) return append();
    if (profile_->parsed()) return profile();
  } catch (const std::exception& error) {
    print_error(error);
    return 2;
  }
  return 2;
}

int ResultsCommands::validate() const {
  int code = 0;
  for (const auto& file : files_) {
    try {
      const auto doc = results::load_results(file);
      std::printf("OK %s: run %s, %zu cells\n", file.c_str(), doc.value("run_id", std::string()).c_str(),
                  doc["cells"].size());
    } catch (const std::exception& error) {
      print_error(error);
      code = 2;
    }
  }
  return code;
}

int ResultsCommands::compare() const {
  if (baseline_.empty() && history_.empty()) throw std::runtime_error("compare: give --baseline FILE or --history DIR");
  results::SourcedDocument current{results::load_results(file_), file_};
  std::vector<results::SourcedDocument> baseline;
  if (!baseline_.empty())
    baseline.push_back({results::load_results(baseline_), baseline_});
  else
    baseline = results::history_baseline(history_, current.doc, window_);
  auto comparison = results::compare_documents(current, baseline, options_);
  if (!confirm_.empty()) {
    results::SourcedDocument rerun{results::load_results(confirm_), confirm_};
    results::CompareOptions rerun_options = options_;
    rerun_options.alpha = options_.confirm_alpha;
    results::confirm_regressions(comparison, results::compare_documents(rerun, baseline, rerun_options));
  }
  if (!regressed_filter_.empty())
    io::write_file_atomic(regressed_filter_, results::regressed_cells_filter(comparison) + "\n");
  const std::string markdown = results::to_markdown(comparison);
  std::fputs(markdown.c_str(), stdout);
  std::fflush(stdout);
  if (!markdown_.empty()) io::write_file_atomic(markdown_, markdown);
  if (!json_.empty()) io::write_file_atomic(json_, results::to_json(comparison).dump(2) + "\n");
  return comparison.has_regression() ? 1 : 0;
}

int ResultsCommands::dashboard() const {
  results::DashboardOptions options;
  options.history_dir = history_;
  options.machine = machine_;
  options.baseline_file = baseline_;
  options.window = window_;
  options.compare = options_;
  const std::string html = results::build_dashboard(options);
  io::write_file_atomic(out_, html);
  std::printf("wrote %s (%zu bytes)\n", out_.c_str(), html.size());
  return 0;
}

int ResultsCommands::append() const {
  const auto path = results::append_to_history(history_, results::load_results(file_));
  std::printf("%s\n", path.string().c_str());
  return 0;
}

int ResultsCommands::profile() const {
  std::vector<results::OpProfile> profiles;
  for (const auto& file : files_) profiles.push_back(results::read_op_profile(file));
  const std::string category = category_.empty() ? results::default_profile_category(profiles) : category_;
  std::fputs(results::profile_table(profiles, category, top_).c_str(), stdout);
  return 0;
}

}  // namespace fsdpp::cli
