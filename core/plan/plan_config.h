// What a plan is asked about: one training configuration, in `fsdpp train`'s terms, on a
// stated machine. Plain data; memory_model.h and step_time_model.h read it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/fsdp/sharding.h"

namespace fsdpp::plan {

// The accelerator a plan targets, and the figures the time model uses for it.
struct DeviceSpec {
  std::string name;               // "h100", "h200", "a100-80g", "cpu", or "custom"
  int64_t memory_bytes = 0;       // per device; 0: not stated (nothing is rejected for size)
  double matmul_flops_per_s = 0;  // dense bf16/fp16 matmul the device sustains (see step_time_model.h)
  double memory_bytes_per_s = 0;  // HBM (or DRAM) bandwidth, datasheet
};

// Known kinds: h100 (80 GB SXM), h200 (141 GB), a100-80g. Throws std::invalid_argument
// naming --gpu-memory for any other name.
DeviceSpec device_spec(const std::string& kind);

// What --gpu-memory names: a known kind (exactly "h100", "h200" or "a100-80g"), or a size
// (parse_bytes) on a device with the H100's rates, named "custom (H100 rates)". Throws
// std::invalid_argument naming --gpu-memory.
DeviceSpec gpu_memory_device(const std::string& text);

// "80e9", "80GB", "80GiB", "512MiB", "1kb", "123" (bytes). Decimal (kB, MB, GB, TB) and
// binary (KiB, MiB, GiB, TiB) suffixes, case-insensitive. Throws std::invalid_argument
// naming `flag` for anything else, or for a value below 1 byte.
int64_t parse_bytes(const std::string& text, const std::string& flag);

// "450GB/s", "50e9", "400Gb/s" (bits): bytes per second. Throws naming `flag`.
double parse_bandwidth(const std::string& text, const std::string& flag);

struct PlanConfig {
  fsdp::ShardingStrategy strategy = fsdp::ShardingStrategy::FullShard;
  int nproc = 1;  // ranks per node
  int nodes = 1;
  int hybrid_shard_size = 0;             // hybrid: ranks per shard group (0: nproc when nodes > 1,
                                         // else FsdpOptions' default, the largest divisor below the world)
  std::string mixed_precision = "fp32";  // param/compute dtype: fp32, bf16, fp16 (fp32 masters, fp32 reduce)
  bool activation_checkpointing = false;
  int ac_freq = 1;  // every k-th block is checkpointed
  bool cpu_offload = false;
  bool prefetch = true;  // forward and backward prefetch (2 all-gathers in flight)
  // `fsdpp train --no-reshard-after-forward`: these units (indices in module order, the root
  // excluded; negative from the end) stay unsharded from forward to backward.
  std::vector<int64_t> no_reshard_after_forward;
  // `fsdpp train --reshard-after-forward-group-size`: every other non-root unit keeps 1/K of
  // its gathered buffer from forward to backward and all-gathers over K ranks in backward
  // (0: off).
  int reshard_after_forward_group_size = 0;
  bool fused_cross_entropy = false;    // the loss: fsdpp's CUDA kernel (core/kernels/cross_entropy.h), else
                                       // torch's cross_entropy on an fp32 copy of the logits
  bool recompute_skips_summed = true;  // with AC: each block's last projection is not recomputed
                                       // (nn::call_summed); false: bench-step --full-recompute
  int64_t batch_size = 1;              // windows per rank per micro-step
  int64_t seq_len = 1024;
  int64_t grad_accum_steps = 1;
  DeviceSpec device;              // the accelerator, or "cpu"
  int64_t host_memory_bytes = 0;  // per node; 0: not stated
  double link_bytes_per_s = 0;    // per rank, one direction; 0: the device kind's default

  int world_size() const { return nproc * nodes; }
  // The shard group's size (the mesh's inner dimension): world for FULL_SHARD and
  // SHARD_GRAD_OP, 1 for NO_SHARD, the hybrid shard size for the hybrid strategies.
  int shard_group_size() const;
};

}  // namespace fsdpp::plan
