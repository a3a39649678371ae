// What every `fsdpp` subcommand is to main(): it adds its flags to the app, and, if the
// parse chose it, runs. One class may own several subcommands (ModelCommands: `generate`,
// `eval`, `model-size`); parsed() and run() then stand for whichever of them was chosen.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace fsdpp::cli {

class Command {
 public:
  virtual ~Command() = default;

  // Adds the subcommand(s), with their flags, defaults and checks, to app. Once, before
  // parsing; the command keeps pointers into app, which must outlive it.
  virtual void add_to(CLI::App& app) = 0;

  // The command line to parse instead of argv, before parsing: argv itself unless this
  // command reads options from a file (`train --config FILE`). Throws
  // std::invalid_argument naming the file for one it cannot use.
  virtual std::vector<std::string> expand_config(const std::vector<std::string>& argv) const { return argv; }

  // Whether the parse chose this command (one of its subcommands). False before parsing.
  virtual bool parsed() const = 0;

  // Checks the parsed flags that need no file and no work (required flags, values that
  // must agree), throwing UsageError or std::invalid_argument naming the flag. main calls
  // it after parsing and before run(), and under FSDPP_PARSE_ONLY=1 (parse_only.h) instead
  // of run(). Only if parsed().
  virtual void check() {}

  // Runs the parsed subcommand and returns the process exit code (usage_error.h). argv:
  // the command line as parsed (after expand_config); a command that launches ranks
  // (--nproc) hands it to each of them, the others ignore it. Throws UsageError for bad
  // input found after parsing, other exceptions for a failed run. Only if parsed().
  virtual int run(const std::vector<std::string>& argv) = 0;

  // run(argv) if parsed(), else -1.
  int run_parsed(const std::vector<std::string>& argv = {}) { return parsed() ? run(argv) : -1; }
};

}  // namespace fsdpp::cli
