// One benchmark cell: a causal LM trained with fsdpp on this rank's device, timed step by
// step. Each step is `fsdpp train`'s step (core/train/train_step.h: forward, backward,
// reduce, unscale with fp16's loss scaling, clip at 1.0, AdamW, the loss all-reduce), timed on every
// rank after a device synchronisation, and a step's time is the slowest rank's (one MAX
// all-reduce per step, outside the timed region). The same cell's matmul peak is measured
// in the same process, in the cell's compute dtype: `mfu` is against it. `mfu_datasheet`
// is against the vendor's dense bf16 peak (datasheet_bf16_flops_per_s, as torchtitan's
// MFU), for bf16 cells on a listed GPU; null otherwise.
//
// FLOPs per token: core/plan/step_time_model.h's model_flops_per_token (model FLOPs, the
// PaLM / nanoGPT convention), the formula `fsdpp plan` predicts with.
//
// `unsharded` is the baseline the benchmark matrix compares FSDP against: the plain model
// in one process, no ShardedModel and no collectives, AdamW over the full parameters and
// torch::nn::utils::clip_grad_norm_. Its mixed precision is autocast to the compute dtype
// over fp32 parameters (PyTorch's single-device way, as the PyTorch peer's single/ddp
// modes), since FSDP's parameter casting needs FSDP.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

#include "core/comm/communicator.h"
#include "core/fsdp/sharding.h"

namespace fsdpp::harness {

struct StepBenchConfig {
  std::string model_type = "gpt2";  // a from-scratch preset family (models/presets)
  std::string model_size = "124M";
  int64_t vocab_size = 0;  // 0: the preset's
  int64_t batch_size = 8;  // per rank
  int64_t seq_len = 1024;
  int warmup_steps = 3;
  int steps = 10;  // measured
  // cpu, cuda, cuda:N (rank r uses cuda:(local_rank % count)); empty: cuda where this
  // build and machine have a GPU, else cpu.
  std::string device;
  std::string mixed_precision = "fp32";  // param dtype: fp32, bf16, fp16 (fp32 masters, fp32 reduce), as train's
  // A TokenDataset spec (as train's --data): each step trains on the windows `fsdpp train`
  // would give this rank (its sampler, shuffled with `seed`). Empty: one fixed random batch.
  std::string data;
  fsdp::ShardingStrategy strategy = fsdp::ShardingStrategy::FullShard;
  int hybrid_shard_size = 0;  // hybrid strategies: ranks per shard group (0: FsdpOptions' default)
  bool unsharded = false;     // the plain model without FSDP (see above); needs a world of 1
  bool activation_checkpointing = false;
  bool cpu_offload = false;
  bool prefetch = true;
  // Deterministic kernels (at::globalContext().setDeterministicAlgorithms(true)). Unlike
  // train's --deterministic, not the world-size invariant folding of gradients and losses.
  bool deterministic = false;
  // Each rank sleeps this percentage of its step's measured duration inside the timed
  // region (a synthetic slowdown for testing regression gates). 0: none.
  double inject_delay_pct = 0;
  uint64_t seed = 0;
  // Llama's RMSNorm on CUDA: PyTorch's fused kernel or HF's eager formula (models/layers.h).
  bool eager_rms_norm = false;
  // With activation checkpointing: recompute each block's last projection too (the
  // recomputation before nn::call_summed; an A/B in one run). Records say which in `recompute`.
  bool full_recompute = false;
  // AdamW through torch::optim::AdamW's per-tensor step instead of FusedAdamW (an A/B of
  // the optimizer kernels; records say which ran in adamw_step).
  bool per_tensor_adamw = false;
  // Rank 0 records its timed steps with PyTorch's profiler and writes the Chrome trace
  // here (step_profiler.h). Profiling slows the steps: such a run's times are not a
  // benchmark. Empty: off.
  std::string profile_trace;
  // CPU: count tensor bytes with core/runtime/counting_cpu_allocator.h (installed for the
  // rest of the process), the figures memory_bytes reports; off, only the resident set is
  // recorded (the counter's overhead is measured against this).
  bool count_cpu_tensors = true;
};

// Collective over `comm`. Returns the cell's numbers (same on every rank), format
// "fsdpp.bench-cell" version 2: config, per-step ms (raw samples), median/min step ms,
// tokens_per_s, model_flops_per_token, achieved_flops_per_s, matmul_peak_flops_per_s, mfu,
// datasheet_peak_flops_per_s and mfu_datasheet (null unless bf16 on a listed GPU),
// memory (bytes: tensors alive after setup and between steps, their peak over the
// measured steps, from CUDA's caching allocator or the CPU's counting allocator; CUDA's
// peak reserved; on the CPU the resident set after setup, between steps and its peak
// (VmRSS, VmHWM); rank 0's, and the maximum over ranks), comm bytes per step by kind
// with the communication thread's busy time and the part callers waited for (exposed),
// the sleep injected into each timed step (injected_delay_ms, this rank's), the host time of
// each phase of each timed step (phase_ms: data, forward, backward, optimizer; this rank's,
// train::StepRecord's: on CUDA a phase ends when its last kernel is queued, and the offload
// copies' wait closes backward), which RMSNorm ran (rms_norm: "fused" or "eager"; Llama
// only), losses (per timed step, the loss train
// logs: the mean over every rank's tokens; without `data` each rank trains every step on
// one batch: randint(0, vocab) from a CPU generator seeded seed * 1000003 + rank;
// torch_peer.py --fixed-batch draws the same), versions and device name.
nlohmann::json run_step_bench(comm::Communicator& comm, int local_rank, const StepBenchConfig& config);

// FLOP/s of an n x n x n matmul in `dtype` on `device` (median of `reps` after warm-up).
double measure_matmul_flops(const std::string& device, const std::string& dtype, int64_t n, int reps);

}  // namespace fsdpp::harness
