// `fsdpp results validate|compare|dashboard|append|profile`: the results documents
// (harness/results/results_document.h), the regression gate (compare.h), the dashboard
// (dashboard.h) and profile traces side by side (op_profile.h) from the command line.
// Exit codes: 0 fine; 1 `compare` found a regression; 2 bad input (flags, files,
// documents), reported as one line naming it.
#pragma once

#include <CLI/CLI.hpp>

#include <cstddef>
#include <string>
#include <vector>

#include "harness/cli/command.h"
#include "harness/results/compare.h"

namespace fsdpp::cli {

class ResultsCommands final : public Command {
 public:
  // Command (command.h): parsed() if a `results` subcommand was. run() reports its own
  // errors (one line) and returns 2 for them: it throws nothing.
  void add_to(CLI::App& app) override;
  bool parsed() const override;
  int run(const std::vector<std::string>& argv) override;

 private:
  int validate() const;
  int compare() const;
  int dashboard() const;
  int append() const;
  int profile() const;

  CLI::App* group_ = nullptr;
  CLI::App* validate_ = nullptr;
  CLI::App* compare_ = nullptr;
  CLI::App* dashboard_ = nullptr;
  CLI::App* append_ = nullptr;
  CLI::App* profile_ = nullptr;
  std::vector<std::string> files_;
  std::string file_, baseline_, history_, machine_, markdown_, json_, out_;
  std::string confirm_, regressed_filter_;  // compare --confirm, --regressed-filter
  size_t window_ = 5;
  std::string category_;  // profile --category
  int top_ = 30;          // profile --top
  results::CompareOptions options_;
};

}  // namespace fsdpp::cli
