// One repetition of one benchmark cell, run as a separate command so that every repetition
// starts from a fresh process (no allocator, thread-pool or CUDA state carried over, and
// the parent never initialises CUDA or OpenMP before it forks):
//   fsdpp cells   `fsdpp bench-step --nproc N ...` (harness/bench/step_bench.h)
//   peer cells    `<FSDPP_PYTHON> harness/peers/torch_peer.py --mode single|ddp|fsdp2 ...`
//                 (harness/peers/README.md), same model config, batch, sequence length,
//                 warm-up and timed steps, AdamW (lr 3e-4, weight decay 0.1 on 2-D+
//                 parameters, constant LR), grad clip 1.0, seed 0; on the CPU also
//                 fsdpp's initial weights and batches (peer_shares_fsdpp_init below).
// Threads: a cell on N ranks gives each rank floor(cores / N) (at least 1); a
// single-process cell (unsharded, pytorch_single) all cores.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/bench/matrix.h"

namespace fsdpp::harness {

struct CellRunSetup {
  std::string device = "cpu";   // cpu or cuda
  double inject_delay_pct = 0;  // fsdpp cells only (bench-step --inject-delay-pct)
  std::string fsdpp_binary;     // empty: this executable
  std::string python;           // empty: the Python whose torch this build uses (FSDPP_PYTHON)
  std::string peer_script;      // empty: <source tree>/harness/peers/torch_peer.py
  double budget_s = 1800;       // wall-clock limit of one repetition (all its ranks)
  int cores = 0;                // 0: runtime::available_cores()
  // CPU cells: pin every rank to its own cores and its OpenMP threads to them, fsdpp and
  // PyTorch alike (`--bind-cores`; the single-process cells get OMP_PROC_BIND=close and
  // OMP_PLACES=threads). On this 2-core VM it removes the run-to-run noise of unpinned
  // threads stacking on one core (README.md, `--bind-cores` and the gate trials).
  bool bind_cores = true;
  // CUDA cells: the GPUs a cell's ranks can use, one each (NCCL gives every rank its own
  // GPU). -1: runtime::cuda_device_count().
  int gpus = -1;
  // Non-empty: every cell's rank 0 records its timed steps with PyTorch's profiler into
  // profile_dir / profile_trace_name(cell) (bench-step and torch_peer.py --profile-trace).
  std::string profile_dir;
};

// "<cell id, '/' replaced by '__'>.trace.json".
std::string profile_trace_name(const BenchCell& cell);

// Whether the cells of `setup` run pinned (bind_cores on a CPU device).
bool binds_cores(const CellRunSetup& setup);

// The repetition's record: "fsdpp.bench-cell" (fsdpp) or "fsdpp.torch_peer" (peers), and
// every timed step's time, the slowest rank's, ms.
// Plain data: its implicit members throw only what copying a json or a vector may
// (allocation), which tidy's exception-escape reads into the implicit noexcept move.
// NOLINTNEXTLINE(bugprone-exception-escape)
struct RepetitionResult {
  std::vector<double> step_ms;
  nlohmann::json record;

  // The repetition's time as Google Benchmark's manual time counts it: the sum of its step
  // times, seconds.
  double seconds() const;
};

// The JSON in `file`; throws std::runtime_error naming the file when it cannot be read or
// is not JSON.
nlohmann::json read_json_file(const std::filesystem::path& file);

// Thrown by run_cell_once when the system says it cannot run this cell here (the PyTorch
// peer's exit code 3: FSDP2 not available); what() is its reason.
class CellUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

int threads_per_rank(const BenchCell& cell, const CellRunSetup& setup);

// Why `cell` cannot run here, known before running it: fp16 fsdpp cells on a CPU whose
// LibTorch has no fp16 kernels (runtime/capabilities.h), fp16 peer cells (the peer trains
// in fp32 or bf16 only), peer cells without an interpreter that imports torch and numpy
// (and transformers, for the families the peer trains as transformers' model classes:
// all but gpt2, llama and mistral), CUDA cells with more ranks than the machine has GPUs.
// nullopt: try it.
std::optional<std::string> unavailable_reason(const BenchCell& cell, const CellRunSetup& setup);

// Whether a peer cell starts from fsdpp's initial weights on fsdpp's batches, so that its
// loss curve is the fsdpp cell's: CPU cells (the weights are written as an HF folder for
// every repetition; on CUDA, with models of billions of parameters, that write is not
// paid and the peers draw their own init and data).
bool peer_shares_fsdpp_init(const BenchCell& cell, const CellRunSetup& setup);

// The command line of one repetition, writing its record to `record_file`; peers read the
// model's config.json from `model_config_file` (written by run_cell_once) and, where
// peer_shares_fsdpp_init, fsdpp's initial weights from the folder "init" beside it, and
// train on fsdpp bench-step's batches (torch_peer.py --weights DIR --fixed-batch).
std::vector<std::string> cell_command(const BenchCell& cell, const CellRunSetup& setup,
                                      const std::filesystem::path& record_file,
                                      const std::filesystem::path& model_config_file);

// Runs one repetition in `work_dir` (scratch, must exist). Throws CellUnavailable (above),
// or std::runtime_error with the command's exit status and last output lines when it fails
// or its record lacks the timed steps.
RepetitionResult run_cell_once(const BenchCell& cell, const CellRunSetup& setup, const std::filesystem::path& work_dir);

}  // namespace fsdpp::harness
