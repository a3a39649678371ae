// fsdpp: the one command-line entry point. Every subcommand is a Command (command.h) in
// one table: main registers them, parses, and runs the parsed one; errors become one line
// on stderr and a non-zero exit.
#include <CLI/CLI.hpp>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "core/runtime/cuda_plugin.h"
#include "harness/cli/bench_command.h"
#include "harness/cli/build_info.h"
#include "harness/cli/checkpoint_commands.h"
#include "harness/cli/command.h"
#include "harness/cli/data_commands.h"
#include "harness/cli/equiv_command.h"
#include "harness/cli/model_commands.h"
#include "harness/cli/parse_only.h"
#include "harness/cli/plan_command.h"
#include "harness/cli/results_commands.h"
#include "harness/cli/selfcheck_command.h"
#include "harness/cli/train_command.h"
#include "harness/cli/usage_error.h"
#include "harness/launch/run_ranks.h"

namespace {

// Every subcommand, in the order `fsdpp --help` lists them.
std::vector<std::unique_ptr<fsdpp::cli::Command>> all_commands() {
  std::vector<std::unique_ptr<fsdpp::cli::Command>> commands;
  commands.push_back(std::make_unique<fsdpp::cli::SelfcheckCommand>());
  commands.push_back(std::make_unique<fsdpp::cli::EquivCommand>());
  commands.push_back(std::make_unique<fsdpp::cli::ModelCommands>());
  commands.push_back(std::make_unique<fsdpp::cli::DataCommands>());
  commands.push_back(std::make_unique<fsdpp::cli::TrainCommand>());
  commands.push_back(std::make_unique<fsdpp::cli::BenchCommand>());
  commands.push_back(std::make_unique<fsdpp::cli::PlanCommand>());
  commands.push_back(std::make_unique<fsdpp::cli::CheckpointCommands>());
  commands.push_back(std::make_unique<fsdpp::cli::ResultsCommands>());
  return commands;
}

// Levenshtein distance: the single-character edits that turn `a` into `b`.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The long flag of the parsed subcommands nearest `word` ("--lrr" -> "--lr"), or "" when
// none is within a third of its length (at least 2 edits).
std::string nearest_flag(const CLI::App& app, const std::string& word) {
  std::string best;
  size_t best_distance = std::max<size_t>(2, word.size() / 3) + 1;
  for (const CLI::App* sub : app.get_subcommands())
    for (const CLI::Option* option : sub->get_options())
      for (const auto& name : option->get_lnames()) {
        const size_t d = edit_distance(word, "--" + name);
        if (d < best_distance) best_distance = d, best = "--" + name;
      }
  return best;
}

// One line for arguments no flag took, in the order given, each flag with its nearest known one.
std::string unexpected_arguments(const CLI::App& app) {
  std::string line = "unexpected argument(s):";
  for (const auto& word : app.remaining(true)) {
    line += " " + word;
    if (word.rfind("--", 0) != 0) continue;
    const auto nearest = nearest_flag(app, word.substr(0, word.find('=')));
    if (!nearest.empty()) line += " (did you mean " + nearest + "?)";
  }
  return line;
}

int run_fsdpp(int argc, char** argv) {
  // A vanished peer must be an error on its socket (EPIPE -> CommError), not SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  for (const std::string& bad :
       {fsdpp::runtime::cuda_plugin_setting_error(), fsdpp::runtime::nccl_engine_setting_error()})
    if (!bad.empty()) {
      std::cerr << "fsdpp: " << bad << "\n";
      return 2;
    }
  CLI::App app{"fsdpp: fully sharded data parallel training core and its test harness"};
  app.require_subcommand(1);
  // The build's facts, then this process's: whether the CUDA plugin is loaded, and from where.
  std::string process = "CUDA plugin " + fsdpp::runtime::cuda_plugin_status();
  if (fsdpp::runtime::cuda_plugin() != nullptr)
    process += "\nNCCL collectives through " + fsdpp::runtime::nccl_engine_name();
  app.set_version_flag("--version", fsdpp::cli::build_info() + "\n" + process,
                       "Print fsdpp's version and commit, the LibTorch, CUDA and NCCL it was built with, and "
                       "whether its CUDA plugin is loaded");
  std::vector<std::string> args(argv, argv + argc);

  // Every option's default shows in --help (subcommands inherit this).
  app.option_defaults()->always_capture_default();
  const auto commands = all_commands();
  for (const auto& command : commands) command->add_to(app);
  // The docs test's hidden modes (parse_only.h): list every flag, or parse without running.
  if (fsdpp::cli::list_flags_requested()) {
    fsdpp::cli::list_flags(app, stdout);
    return 0;
  }
  const bool parse_only = fsdpp::cli::parse_only();
  if (parse_only) fsdpp::cli::skip_path_checks(app);

  try {
    for (const auto& command : commands) args = command->expand_config(args);  // `train --config FILE`
    std::vector<char*> arg_ptrs;
    arg_ptrs.reserve(args.size());
    for (auto& a : args) arg_ptrs.push_back(a.data());
    app.parse(static_cast<int>(arg_ptrs.size()), arg_ptrs.data());
    for (const auto& command : commands)
      if (command->parsed()) command->check();
  } catch (const CLI::ExtrasError&) {
    std::fprintf(stderr, "fsdpp: error: %s\n", unexpected_arguments(app).c_str());
    return 2;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help
    // Bad usage exits 2 (README, exit codes), whatever CLI11's own code for the error is.
    std::fprintf(stderr, "fsdpp: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdpp: error: %s\n", e.what());
    return 2;
  }
  if (parse_only) return 0;
  try {
    for (const auto& command : commands)
      if (command->parsed()) return command->run(args);
  } catch (const fsdpp::cli::UsageError& e) {
    std::fprintf(stderr, "fsdpp: error: %s\n", e.what());
    return fsdpp::cli::kExitBadUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdpp: error: %s\n", fsdpp::harness::exception_message(e).c_str());
    return fsdpp::cli::kExitFailedRun;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // What escapes the command's own handlers (setting up the parser, listing flags) is a
  // failed run, in one line, not std::terminate.
  try {
    return run_fsdpp(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdpp: error: %s\n", e.what());
  } catch (...) {
    std::fprintf(stderr, "fsdpp: error: an unknown exception\n");
  }
  return fsdpp::cli::kExitFailedRun;
}
