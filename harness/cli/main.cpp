// fsdpp: the one command-line entry point. Each subcommand parses its flags here and
// hands off to the library; errors become one line on stderr and a non-zero exit.
#include <CLI/CLI.hpp>

#include <csignal>
#include <cstdio>
#include <iostream>

#include "core/io/atomic_file.h"
#include "harness/cli/distributed.h"
#include "harness/selfcheck/selfcheck.h"

namespace {

struct SelfcheckFlags {
  fsdpp::cli::DistributedFlags dist;
  int64_t numel = (1 << 20) + 3;
  int iterations = 5;
  std::string json_path;
};

int selfcheck_rank(const SelfcheckFlags& flags, fsdpp::comm::Communicator& comm) {
  fsdpp::harness::SelfcheckOptions options;
  options.numel = flags.numel;
  options.iterations = flags.iterations;
  auto result = fsdpp::harness::run_selfcheck(comm, options);
  if (comm.rank() == 0) {
    std::fputs(fsdpp::harness::format_table(result).c_str(), stdout);
    std::fflush(stdout);
    if (!flags.json_path.empty())
      fsdpp::io::write_file_atomic(flags.json_path, fsdpp::harness::to_json(result).dump(2) + "\n");
  }
  return result.all_correct() ? 0 : 2;
}

}  // namespace

int main(int argc, char** argv) {
  // A vanished peer must be an error on its socket (EPIPE -> CommError), not SIGPIPE.
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"fsdpp: fully sharded data parallel training core and its test harness"};
  app.require_subcommand(1);
  std::vector<std::string> args(argv, argv + argc);

  SelfcheckFlags selfcheck;
  auto* sc = app.add_subcommand("selfcheck", "Run every collective on N ranks; check and time each");
  fsdpp::cli::add_distributed_flags(*sc, selfcheck.dist);
  sc->add_option("--numel", selfcheck.numel, "Elements per rank per collective")->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
  sc->add_option("--iterations", selfcheck.iterations, "Timed repetitions per collective")->check(CLI::Range(1, 1000));
  sc->add_option("--json", selfcheck.json_path, "Also write the results as JSON (format fsdpp.selfcheck v1)");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (sc->parsed())
      return fsdpp::cli::run_distributed(args, selfcheck.dist, [&](fsdpp::comm::Communicator& comm, const auto&) {
        return selfcheck_rank(selfcheck, comm);
      });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fsdpp: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
