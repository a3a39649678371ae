#include "core/plan/step_time_model.h"

#include <algorithm>

namespace fsdpp::plan {

namespace {

constexpr double kEfficiencyMax = 0.76;
constexpr double kEfficiencyHalfWidth = 1600;
constexpr double kLogitBytesMoved = 75;  // fp32 copy, log-softmax, its backward, the casts (fitted)
constexpr double kMemoryEfficiency = 0.8;
constexpr double kPcieBytesPerS = 25e9;
constexpr double kHostAdamBytesPerS = 20e9;
constexpr double kNvlinkBytesPerS = 450e9;    // H100/H200 NVLink 4, per direction
constexpr double kInterNodeBytesPerS = 50e9;  // 400 Gb/s InfiniBand per GPU

bool is_matmul_weight(const ParamShape& p) { return p.shape.size() >= 2; }

bool name_has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

}  // namespace

double model_flops_per_token(const std::vector<ParamShape>& named_parameters, int64_t layers, int64_t attention_width,
                             int64_t seq_len, double expert_share) {
  bool separate_head = false;
  for (const auto& p : named_parameters)
    if (p.name == "lm_head.weight") separate_head = true;
  double matmul_params = 0;
  // A tied head is listed as lm_head.weight too; its embedding is then skipped as a lookup.
  for (const auto& p : named_parameters) {
    if (!is_matmul_weight(p)) continue;  // biases, norms
    if (name_has(p.name, "wpe") || name_has(p.name, "embed_positions")) continue;
    const bool token_embedding = name_has(p.name, "wte") || name_has(p.name, "embed_tokens");
    if (token_embedding && separate_head) continue;  // a lookup; the head is counted itself
    matmul_params += static_cast<double>(p.numel()) * (name_has(p.name, ".experts.") ? expert_share : 1.0);
  }
  return 6.0 * matmul_params + 12.0 * static_cast<double>(layers * attention_width * seq_len);
}

double model_flops_per_token(const ModelShape& model, int64_t seq_len) {
  return model_flops_per_token(model.named_parameters, model.layers, model.attention_width, seq_len,
                               model.expert_share);
}

StepTimeEstimate estimate_step_time(const ModelShape& model, const PlanConfig& c, const MemoryEstimate& memory) {
  StepTimeEstimate t;
  t.flops_per_token = model_flops_per_token(model, c.seq_len);
  if (c.device.matmul_flops_per_s <= 0) {
    t.why_not = "no device rate: pass --gpu-memory h100|h200|a100-80g (CPU steps are not modelled)";
    return t;
  }
  t.predicted = true;
  auto& a = t.assumptions;
  const bool fp32 = c.mixed_precision == "fp32";
  // fp32 runs on the CUDA cores: 67 of H100's 989 dense TFLOP/s (TF32 is off, as the benchmark's).
  a.matmul_flops_per_s = c.device.matmul_flops_per_s * (fp32 ? 67.0 / 989.0 : 1.0);
  a.matmul_source = c.device.name +
                    ": measured n=8192 bf16 matmul on an H100 (results/gpu/), scaled by datasheet ratios" +
                    std::string(fp32 ? "; fp32 at 67/989 of it" : "");
  const double h = static_cast<double>(model.hidden);
  a.efficiency = kEfficiencyMax * h / (h + kEfficiencyHalfWidth);
  a.efficiency_source = "e(h) = 0.76 h / (h + 1600), fitted to the 12 committed H100 FSDP cells (docs/plan.md)";
  a.memory_bytes_per_s = kMemoryEfficiency * c.device.memory_bytes_per_s;
  a.link_bytes_per_s =
      c.link_bytes_per_s > 0 ? c.link_bytes_per_s : (c.nodes > 1 ? kInterNodeBytesPerS : kNvlinkBytesPerS);
  a.link_source = c.link_bytes_per_s > 0 ? "--link-bandwidth"
                  : c.nodes > 1          ? "default: 50 GB/s per GPU between nodes (400 Gb/s InfiniBand)"
                                         : "default: 450 GB/s per direction (NVLink 4)";

  const double tokens = static_cast<double>(c.batch_size * c.seq_len * c.grad_accum_steps);  // per rank per step
  double head_params = 0;
  for (const auto& p : model.named_parameters)
    if (p.name == "lm_head.weight") head_params = static_cast<double>(p.numel());
  const double head_flops = 6.0 * head_params;
  const double block_flops = t.flops_per_token - head_flops;
  const int64_t checkpointed_blocks = model.layers / c.ac_freq;  // every ac_freq-th block
  const double recomputed = c.activation_checkpointing && model.layers > 0
                                ? static_cast<double>(checkpointed_blocks) / static_cast<double>(model.layers)
                                : 0.0;
  // A recomputed block reruns its forward (a third of its FLOPs) less the projection it
  // skips: 2 FLOPs per weight element per token, per recomputed block.
  const double skipped =
      c.activation_checkpointing && c.recompute_skips_summed
          ? 2.0 * static_cast<double>(model.skipped_projection_params) * static_cast<double>(checkpointed_blocks)
          : 0.0;
  const double executed = (block_flops * (1.0 + recomputed / 3.0) - skipped + head_flops) * tokens;
  t.flops_per_step_per_rank = executed;
  const double logit_seconds = kLogitBytesMoved * tokens * static_cast<double>(model.vocab) / a.memory_bytes_per_s;
  const double compute_s = executed / (a.matmul_flops_per_s * a.efficiency) + logit_seconds;
  t.compute_ms = compute_s * 1e3;

  const double comm_s = static_cast<double>(memory.comm.total()) / a.link_bytes_per_s;
  t.comm_ms = comm_s * 1e3;
  const double units = std::max<double>(1.0, static_cast<double>(model.units.size()));
  // Prefetch hides the collectives behind compute, except the first all-gather and the
  // last reduce-scatter (one unit each); what does not fit behind compute is exposed.
  const double unhidden = comm_s * (c.prefetch ? 2.0 / (2.0 * units) : 1.0);
  t.exposed_comm_ms = (std::max(0.0, comm_s - compute_s) + unhidden) * 1e3;
  if (c.cpu_offload) {
    const double gathers = static_cast<double>(memory.comm.all_gather > 0 ? 2 : 1);
    const double pcie =
        (gathers * static_cast<double>(memory.param_shard_bytes) + static_cast<double>(memory.grad_shard_bytes)) /
        kPcieBytesPerS;
    const double adam =
        2.0 * static_cast<double>(memory.param_shard_bytes + memory.grad_shard_bytes + memory.optimizer_state_bytes) /
        kHostAdamBytesPerS;
    t.offload_ms = (pcie + adam) * 1e3;
  }
  t.step_ms = t.compute_ms + t.exposed_comm_ms + t.offload_ms;
  t.tokens_per_s = tokens * c.world_size() / (t.step_ms / 1e3);
  t.mfu = t.flops_per_token * tokens / (t.step_ms / 1e3) / c.device.matmul_flops_per_s;
  return t;
}

}  // namespace fsdpp::plan
