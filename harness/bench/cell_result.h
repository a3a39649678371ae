// What a benchmark cell measured, turned into a cell of an fsdpp.results document
// (results/README.md; metric names from the agreed layout).
//
// Statistics (harness/results/stats.h, the regression gate's own):
//   step_ms_median/min/iqr/cv  over every timed step of every repetition (samples.step_ms;
//                              each the slowest rank's step); CV = sample stddev / mean
//   tokens_per_s               median over repetitions of global batch * seq_len * timed
//                              steps / (Google Benchmark's manual time of the repetition,
//                              i.e. the sum of its step times); samples.tokens_per_s
//   achieved_flops_per_s       model FLOPs per token (harness/bench/step_bench.h) *
//                              tokens_per_s / ranks: per rank, like the matmul peak
//   matmul_peak_flops_per_s    median over repetitions of the rank's n^3 matmul in the
//                              cell's dtype, measured in the same run; mfu = achieved / peak
//   datasheet_peak_flops_per_s the vendor's dense bf16 peak of the records' device_name, as
//                              torchtitan's MFU takes it (bf16 cells on a listed GPU; else
//                              null); mfu_datasheet = achieved / that peak
//   persistent_bytes_per_rank  median over repetitions of the largest rank's memory at the
//                              start of the first timed step (after warm-up: parameters,
//                              optimizer state, what the step keeps); CUDA: allocated bytes,
//                              CPU: resident set (so it includes the runtime itself)
//   peak_bytes_per_rank        largest over repetitions and ranks of the peak during the
//                              timed steps (CUDA: peak allocated; CPU: VmHWM); peers: the
//                              same measure from torch_peer.py
//   comm_bytes_per_step_<kind> bytes rank 0 sent per step, FSDP's own groups (median)
//   comm_ms_per_step           all-gather + reduce-scatter + all-reduce time on the
//                              communication threads per step, mean over ranks (median)
//   exposed_comm_fraction      time the training thread waited in those collectives /
//                              their busy time, summed over ranks and repetitions
//   overhead_vs_unsharded      step_ms_median / step_ms_median of the cell's unsharded
//                              baseline (matrix.h: same model, global batch, precision,
//                              AC, determinism), when that ran ok
//   tokens_per_s_ratio_vs_pytorch_ddp / _single / _fsdp2   tokens_per_s / the matching
//                              peer's (matrix.h peer_matches), when that ran ok
//   peak_bytes_ratio_vs_pytorch_fsdp2   peak_bytes_per_rank / the matching FSDP2 cell's
// A metric that cannot be measured for a cell is present with value null.
// Samples: step_ms, tokens_per_s, peak_bytes_per_rank (per repetition) and, when
// --inject-delay-pct is set, injected_delay_ms (rank 0's sleep inside each timed step).
// config.injected_delay_pct is that percentage for fsdpp cells and 0 for the peers, whose
// steps are timed inside torch_peer.py and are never slowed.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>
#include <vector>

#include "harness/bench/cell_run.h"
#include "harness/bench/matrix.h"

namespace fsdpp::harness {

// The vendor's datasheet dense bf16 FLOP/s of the GPU that torch names `device_name` (e.g.
// "NVIDIA H200"), as torchtitan's MFU uses it; none for a device it does not list.
std::optional<double> datasheet_bf16_flops_per_s(const std::string& device_name);

struct CellOutcome {
  BenchCell cell;
  std::string status = "ok";                  // ok, unavailable, failed
  std::string reason;                         // when not ok
  std::vector<RepetitionResult> repetitions;  // every repetition (ok cells)
  // Google Benchmark's manual time of each repetition, seconds (the sum of its step times).
  std::vector<double> repetition_seconds;
  int repetitions_requested = 1;
  int threads_per_rank = 1;
  std::string device = "cpu";
  double injected_delay_pct = 0;  // fsdpp cells; 0 for peers (their timing is theirs)
  bool cores_bound = false;       // ranks pinned to their own cores (CellRunSetup::bind_cores)
};

// The document's "cells": one per outcome, in order, with the comparisons between them
// (overhead_vs_unsharded, tokens_per_s ratios) filled where both sides ran ok.
nlohmann::json results_cells(const std::vector<CellOutcome>& outcomes);

}  // namespace fsdpp::harness
