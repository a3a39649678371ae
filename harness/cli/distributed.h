// How every distributed subcommand starts: either as the launcher of N local ranks
// (--nproc N, like torchrun --nproc-per-node N) or as one rank of a world described by
// the environment (torchrun, SLURM, or our own launcher).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/comm/communicator.h"

namespace fsdpp::cli {

struct DistributedFlags {
  int nproc = 0;                     // >0: spawn this many local ranks running the same command
  int threads = 0;                   // intra-op threads per rank; 0: floor(cores / local ranks)
  bool bind_cores = false;           // with --nproc: pin each rank to its own `threads` CPUs (launcher.h rank_cpus)
  bool release_host_memory = false;  // glibc's default heap policy, not runtime/host_memory.h's
  double timeout_s = 300;            // per collective
  double budget_s = 0;               // whole launch (with --nproc); 0: no limit
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
};

void add_distributed_flags(CLI::App& command, DistributedFlags& flags);

using RankMain = std::function<int(comm::Communicator& comm, const comm::WorldSpec& world)>;

// Launcher or rank, as described above. Returns the process exit code.
int run_distributed(const std::vector<std::string>& argv, const DistributedFlags& flags, const RankMain& main);

}  // namespace fsdpp::cli
