// `fsdpp selfcheck`: every collective (harness/selfcheck/selfcheck.h) on N local ranks
// (--nproc) or under torchrun/srun, each result checked and timed; rank 0 prints the
// table and, with --json, writes it (format fsdpp.selfcheck v1). Exits 2 if a collective
// gave a wrong result on any rank.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "harness/cli/command.h"
#include "harness/cli/distributed.h"

namespace fsdpp::cli {

class SelfcheckCommand final : public Command {
 public:
  void add_to(CLI::App& app) override;
  bool parsed() const override;
  int run(const std::vector<std::string>& argv) override;

 private:
  // One rank's part: the collectives, then rank 0's table and JSON. Its exit code.
  int run_rank(comm::Communicator& comm) const;

  CLI::App* command_ = nullptr;
  DistributedFlags dist_;
  int64_t numel_ = (1 << 20) + 3;
  int iterations_ = 5;
  std::string json_path_;
};

}  // namespace fsdpp::cli
