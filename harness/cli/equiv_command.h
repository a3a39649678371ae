// `fsdpp equiv`: a model trained sharded on N local ranks (--nproc) or under
// torchrun/srun, and unsharded in one process, compared after every step
// (harness/equiv/equivalence.h); rank 0 prints the report and, with --json, writes it
// (format fsdpp.equiv v1). Exits 2 if a step left the tolerance.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "harness/cli/command.h"
#include "harness/cli/distributed.h"

namespace fsdpp::cli {

class EquivCommand final : public Command {
 public:
  void add_to(CLI::App& app) override;
  bool parsed() const override;
  int run(const std::vector<std::string>& argv) override;

 private:
  // One rank's part: the comparison, then rank 0's report and JSON. Its exit code.
  int run_rank(comm::Communicator& comm) const;

  CLI::App* command_ = nullptr;
  DistributedFlags dist_;
  std::string model_ = "tiny_transformer";
  std::string strategy_ = "full_shard";
  int steps_ = 10;
  bool deterministic_ = false;
  bool no_prefetch_ = false;
  std::string backward_prefetch_ = "pre";
  int max_inflight_ = 2;
  int grad_accum_ = 1;
  bool no_sync_accum_ = false;
  double clip_ = 0;
  double norm_type_ = 2;
  double adam_eps_ = 1e-6;
  double lr_ = 1e-3;
  uint64_t seed_ = 1;
  int hybrid_shard_size_ = 0;
  std::string mixed_precision_ = "fp32", reduce_dtype_;
  bool cpu_offload_ = false;
  std::string json_path_;
};

}  // namespace fsdpp::cli
