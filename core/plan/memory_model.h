// Bytes per rank of one FSDP training configuration: what stays (shards, gradients,
// optimizer state), what comes and goes (unsharded units, activations, logits, the
// collectives' buffers), the peak, and the bytes each collective sends per step. Exact
// where the code is deterministic: shard and padding bytes come from the model's real
// units (model_shape.h) cut by core/fsdp/sharding.h's rule, collective bytes from the
// Gloo transfer plan (core/comm/chunk_plan.h) that the communicator tallies. The
// transient terms are counts of the tensors autograd saves, stated in PLAN.md and
// docs/plan.md, and the peak is the largest of three moments of a step.
#pragma once

#include <cstdint>
#include <string>

#include "core/plan/model_shape.h"
#include "core/plan/plan_config.h"

namespace fsdpp::plan {

// Bytes rank 0 puts on the wire in one optimizer step, by collective (the benchmark's
// comm.<kind>.bytes_sent_per_step).
struct CollectiveBytes {
  int64_t all_gather = 0;
  int64_t reduce_scatter = 0;
  int64_t all_reduce = 0;
  int64_t total() const { return all_gather + reduce_scatter + all_reduce; }
};

struct MemoryEstimate {
  // Persistent, per rank. The shards are the fp32 masters (FSDP2's layout): with mixed
  // precision no second fp32 copy exists, so fp32_master_extra_bytes is 0; it is listed
  // so that a reader comparing with DeepSpeed's accounting sees where the masters are.
  int64_t param_shard_bytes = 0;      // flat shard buffers incl. padding (full tensors when replicated)
  int64_t padding_bytes = 0;          // zero rows inside param_shard_bytes (rank 0's)
  int64_t grad_shard_bytes = 0;       // same layout as the shards, after backward
  int64_t optimizer_state_bytes = 0;  // AdamW exp_avg + exp_avg_sq, fp32
  int64_t fp32_master_extra_bytes = 0;
  bool offloaded = false;  // the four above live in host memory (--cpu-offload)
  // On the device before the first step: the shards, as the CUDA caching allocator counts
  // them on a GPU (caching_allocator.h), their bytes on the CPU; 0 with offload on a GPU
  // (on the CPU, host and device are one memory: offload moves nothing off it).
  int64_t device_persistent_after_setup = 0;
  int64_t host_persistent_bytes = 0;  // offload: shards + grads + optimizer state

  // Transient, per rank.
  int prefetch_depth = 1;                   // all-gathers in flight
  int64_t unsharded_unit_bytes = 0;         // largest block unit, unsharded, in the compute dtype
  int64_t unsharded_root_bytes = 0;         // the root unit, unsharded, in the compute dtype
  int64_t unsharded_in_flight_bytes = 0;    // at the loss: root (+ every unit for SHARD_GRAD_OP)
  int64_t activation_bytes_without_ac = 0;  // everything autograd saves for one micro-batch
  int64_t activation_bytes_with_ac = 0;     // with this config's --ac-freq
  int64_t activation_bytes = 0;             // the one this config uses
  int64_t logits_bytes = 0;                 // at the loss's backward, per logit: 12 bytes (composite: fp32 copy,
                                            // log-softmax, grads) or 2 x the compute dtype's (fused: logits, grad)
  int64_t recompute_bytes = 0;              // one checkpointed block's activations, rebuilt in backward
  int64_t all_gather_buffer_bytes = 0;      // largest unit: copy-in shard + gathered output
  // Largest unit: flat gradient input + output shard (+ Gloo's receive buffer on the CPU).
  int64_t reduce_scatter_buffer_bytes = 0;

  // The peak: the largest of the loss's backward, a block's backward, the optimizer step.
  int64_t peak_at_loss = 0;
  int64_t peak_in_backward = 0;
  int64_t peak_at_optimizer = 0;
  int64_t peak_bytes = 0;
  std::string peak_phase;  // "loss", "backward" or "optimizer"

  CollectiveBytes comm;
};

// Throws std::invalid_argument naming the flag when the configuration cannot run: a world
// the hybrid shard size does not divide, a sequence longer than the model's positions.
MemoryEstimate estimate_memory(const ModelShape& model, const PlanConfig& config);

// Bytes rank 0 sends in an all-reduce of `numel` elements of `element_size` over `ranks`
// (the Gloo backend's reduce-scatter then all-gather of ceil(numel / ranks) chunks).
int64_t all_reduce_bytes_sent(int64_t numel, int64_t element_size, int ranks);

// Bytes per element of a compute dtype name (fp32 4, bf16 and fp16 2). Throws naming
// --mixed-precision for another.
int64_t compute_element_size(const std::string& mixed_precision);

}  // namespace fsdpp::plan
