// Where this process sits in the job: rank, world size, node-local placement and the
// address of the TCPStore that all ranks meet at. Read from the environment exactly as
// torchrun and SLURM set it, with explicit options taking precedence.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>

namespace fsdpp::comm {

struct WorldSpec {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;        // torchrun's default
  std::string source = "single";  // "explicit", "torchrun", "slurm" or "single"
  // torchrun's agent already hosts a TCPStore at master_addr:master_port
  // (TORCHELASTIC_USE_AGENT_STORE=True, as PyTorch's env:// rendezvous reads it); rank 0
  // then hosts fsdpp's store elsewhere and publishes where through the agent's (connect.h).
  bool agent_store = false;
  int restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: which attempt of an elastic run this is

  // One line, identical on every rank of a world except for the rank fields.
  std::string describe() const;
};

// Values that beat the environment (e.g. from command-line flags).
struct WorldOverrides {
  std::optional<int> rank, world_size, local_rank, local_world_size, master_port;
  std::optional<std::string> master_addr;
};

// Reads one environment variable; returns nullopt when unset. Tests pass a map.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();
EnvLookup env_from_map(std::map<std::string, std::string> vars);

// Precedence: overrides > torchrun variables (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_USE_AGENT_STORE,
// TORCHELASTIC_RESTART_COUNT; an overridden master address or port is fsdpp's own, not the
// agent's) > SLURM variables (SLURM_PROCID,
// SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE, master =
// MASTER_ADDR or the first host of SLURM_JOB_NODELIST) > a single process.
// Throws std::invalid_argument naming the variable on malformed or inconsistent values.
WorldSpec resolve_world(const EnvLookup& env, const WorldOverrides& overrides = {});

// First host of a SLURM hostlist expression: "node[003-005,9],gpu1" -> "node003".
// Throws std::invalid_argument on malformed input.
std::string first_slurm_host(const std::string& nodelist);

// Every host of a SLURM hostlist expression, in order, with zero padding kept.
std::vector<std::string> expand_slurm_hostlist(const std::string& nodelist);

}  // namespace fsdpp::comm
