// Two hidden modes of `fsdpp` that let a test hold the documentation to the CLI
// (suites/docs/check_docs.py): neither runs a command.
//
//   FSDPP_PARSE_ONLY=1 fsdpp ARGS...   parses ARGS exactly as a real run would (subcommands,
//       flags, validators, `train --config` expansion, each command's check()), then exits 0,
//       or prints the usual one "fsdpp: error:" line and exits 2. Paths need not exist: docs
//       write placeholders such as `--model <dir>`.
//   FSDPP_LIST_FLAGS=1 fsdpp           prints every subcommand and long flag (list_flags).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace fsdpp::cli {

// Whether the environment variable FSDPP_PARSE_ONLY is "1".
inline bool parse_only() {
  const char* value = std::getenv("FSDPP_PARSE_ONLY");
  return value != nullptr && std::string(value) == "1";
}

// For parse-only mode: turns off, on app and all its subcommands, CLI11's checks that a path
// exists (CLI::ExistingFile, ExistingDirectory, ExistingPath), the only CLI11 validators that
// look at the file system. Every other validator stays on. Before parsing.
void skip_path_checks(CLI::App& app);

// Whether the environment variable FSDPP_LIST_FLAGS is "1".
inline bool list_flags_requested() {
  const char* value = std::getenv("FSDPP_LIST_FLAGS");
  return value != nullptr && std::string(value) == "1";
}

// Writes to out, one per line, "fsdpp <path>" for every subcommand (path: the subcommand
// names from the top, e.g. "fsdpp results compare") and "fsdpp <path> <--name>" for each long
// name of each of its options ("fsdpp --version" for the top level's). Positional arguments
// and --help, which every subcommand has, are left out. In the order --help lists them.
void list_flags(const CLI::App& app, std::FILE* out);

}  // namespace fsdpp::cli
