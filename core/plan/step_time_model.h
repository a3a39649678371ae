// FLOPs of a training step and the predicted step time of one configuration.
//
// FLOPs per token (model FLOPs, the PaLM / nanoGPT convention; recomputation under
// activation checkpointing is not counted): 6 * (parameters that enter a matmul: every
// weight except position embeddings and norms; the LM head counts once even when tied)
// + 12 * layers * attention width * sequence length. A mixture of experts' expert weights
// (names holding ".experts.") count at the share of them a token runs, top-k / experts:
// active parameters for FLOPs, while memory counts them all. The benchmark's MFU and this
// plan both use model_flops_per_token; there is no other copy in C++.
//
// Step time (a roofline with a width-dependent matmul efficiency, all terms in PLAN.md):
//   compute   = (block FLOPs * (1 + recomputed share / 3) - recomputed share * skipped
//                projection FLOPs + head FLOPs) / (rate * e(h))
//               + 75 bytes per logit / (0.8 * memory bandwidth)
//   e(h)      = 0.76 * h / (h + 1600), h the model width
//   comm      = bytes sent per step / link bandwidth, overlapped with compute except one
//               unit's all-gather and reduce-scatter
//   offload   = shards and gradients over PCIe (25 GB/s) + AdamW on the host (20 GB/s)
// The two constants of e(h) and the 75 bytes per logit were fitted (smallest worst error,
// e capped below 0.8) to the 12 committed H100 FSDP cells: results/gpu/ and the two gpu
// runs in results/history/90dab4574e180770/. They are calibration, not first principles,
// and the H100 validation is in-sample (docs/plan.md).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "core/plan/memory_model.h"
#include "core/plan/model_shape.h"
#include "core/plan/plan_config.h"

namespace fsdpp::plan {

// See above. `named_parameters`: every parameter under every name, tied weights under
// each name (torch's named_parameters order); layers and attention width from the model;
// expert_share: the experts a token runs over all experts (1 without experts).
double model_flops_per_token(const std::vector<ParamShape>& named_parameters, int64_t layers, int64_t attention_width,
                             int64_t seq_len, double expert_share = 1.0);
double model_flops_per_token(const ModelShape& model, int64_t seq_len);

struct TimeAssumptions {
  double matmul_flops_per_s = 0;  // the device's rate in the compute dtype
  std::string matmul_source;      // where that figure came from
  double efficiency = 0;          // e(h)
  std::string efficiency_source;
  double memory_bytes_per_s = 0;  // effective (0.8 x datasheet)
  double link_bytes_per_s = 0;
  std::string link_source;
};

struct StepTimeEstimate {
  bool predicted = false;              // false without a device rate (CPU plans): times stay 0
  std::string why_not;                 // when not predicted
  double flops_per_token = 0;          // model FLOPs (see above)
  double flops_per_step_per_rank = 0;  // executed, with recomputation
  double compute_ms = 0;
  double comm_ms = 0;          // all collectives' bytes / link bandwidth
  double exposed_comm_ms = 0;  // the part not hidden behind compute
  double offload_ms = 0;
  double step_ms = 0;
  double tokens_per_s = 0;  // all ranks
  double mfu = 0;           // model FLOPs / (step time * rate), per device
  TimeAssumptions assumptions;
};

StepTimeEstimate estimate_step_time(const ModelShape& model, const PlanConfig& config, const MemoryEstimate& memory);

}  // namespace fsdpp::plan
