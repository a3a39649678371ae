// fsdpp selfcheck: runs every collective in every dtype it allows on the current group,
// checks each result against the single-process reference, and times it.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "core/comm/communicator.h"

namespace fsdpp::harness {

struct SelfcheckOptions {
  int64_t numel = (1 << 20) + 3;  // elements per rank; odd on purpose (uneven chunks)
  int iterations = 5;             // timed repetitions after one checked run
  uint64_t seed = 1234;
};

struct SelfcheckRow {
  std::string op;
  std::string dtype;
  int64_t numel = 0;         // elements of the op's "size" (see bytes)
  int64_t bytes = 0;         // nccl-tests' size: all_gather output, reduce_scatter input, else the tensor
  int64_t bytes_sent = 0;    // by this rank, one call, from the communicator's accounting
  bool correct = false;      // on every rank
  double max_abs_error = 0;  // worst over ranks
  double time_ms = 0;        // median over iterations of the slowest rank
  double busbw_gbs = 0;      // nccl-tests' bus bandwidth
};

struct SelfcheckResult {
  int world_size = 1;
  std::vector<SelfcheckRow> rows;
  bool all_correct() const;
};

// Collective over the group: every rank must call it with the same options.
SelfcheckResult run_selfcheck(comm::Communicator& comm, const SelfcheckOptions& options);

std::string format_table(const SelfcheckResult& result);

// Versioned record ("fsdpp.selfcheck", version 1): see results/README.md.
nlohmann::json to_json(const SelfcheckResult& result);

}  // namespace fsdpp::harness
