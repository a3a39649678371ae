#include "harness/cli/selfcheck_command.h"

#include <cstdio>

#include "core/io/atomic_file.h"
#include "harness/selfcheck/selfcheck.h"

namespace fsdpp::cli {

void SelfcheckCommand::add_to(CLI::App& app) {
  command_ = app.add_subcommand("selfcheck", "Run every collective on N ranks; check and time each");
  add_distributed_flags(*command_, dist_);
  command_->add_option("--numel", numel_, "Elements per rank per collective")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 32));
  command_->add_option("--iterations", iterations_, "Timed repetitions per collective")->check(CLI::Range(1, 1000));
  command_->add_option("--json", json_path_, "Also write the results as JSON (format fsdpp.selfcheck v1)");
}

bool SelfcheckCommand::parsed() const { return command_ != nullptr && command_->parsed(); }

int SelfcheckCommand::run(const std::vector<std::string>& argv) {
  return run_distributed(argv, dist_, [&](comm::Communicator& comm, const auto&) { return run_rank(comm); });
}

int SelfcheckCommand::run_rank(comm::Communicator& comm) const {
  harness::SelfcheckOptions options;
  options.numel = numel_;
  options.iterations = iterations_;
  auto result = harness::run_selfcheck(comm, options);
  if (comm.rank() == 0) {
    std::fputs(harness::format_table(result).c_str(), stdout);
    std::fflush(stdout);
    if (!json_path_.empty()) io::write_file_atomic(json_path_, harness::to_json(result).dump(2) + "\n");
  }
  return result.all_correct() ? 0 : 2;
}

}  // namespace fsdpp::cli
