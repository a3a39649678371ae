#include "core/plan/plan_document.h"

#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace fsdpp::plan {

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) {
    bytes /= 1000;
    ++u;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", bytes, units[u]);
  return buf;
}

Plan make_plan(const std::string& model, const ModelShape& shape, const PlanConfig& config) {
  Plan p{model, shape, config, estimate_memory(shape, config), {}, true, ""};
  p.time = estimate_step_time(shape, config, p.memory);
  if (config.device.memory_bytes > 0 && p.memory.peak_bytes > config.device.memory_bytes) {
    p.fits = false;
    p.fit_reason = "does not fit: peak " + format_bytes(static_cast<double>(p.memory.peak_bytes)) + " > " +
                   format_bytes(static_cast<double>(config.device.memory_bytes)) + " per device";
  } else if (config.cpu_offload && config.host_memory_bytes > 0 &&
             p.memory.host_persistent_bytes * config.nproc > config.host_memory_bytes) {
    p.fits = false;
    p.fit_reason = "does not fit: host " +
                   format_bytes(static_cast<double>(p.memory.host_persistent_bytes * config.nproc)) + " > " +
                   format_bytes(static_cast<double>(config.host_memory_bytes)) + " per node";
  }
  return p;
}

std::string train_flags(const std::string& model_flags, const PlanConfig& c) {
  std::ostringstream s;
  s << "fsdpp train " << model_flags << " --nproc " << c.nproc << " --strategy " << fsdp::to_string(c.strategy);
  if ((c.strategy == fsdp::ShardingStrategy::HybridShard || c.strategy == fsdp::ShardingStrategy::HybridShardZero2))
    s << " --hybrid-shard-size " << c.shard_group_size();
  s << " --mixed-precision " << c.mixed_precision;
  if (c.activation_checkpointing) s << " --activation-checkpointing --ac-freq " << c.ac_freq;
  if (c.cpu_offload) s << " --cpu-offload";
  if (!c.no_reshard_after_forward.empty()) {
    s << " --no-reshard-after-forward ";
    for (size_t i = 0; i < c.no_reshard_after_forward.size(); ++i) s << (i ? "," : "") << c.no_reshard_after_forward[i];
  }
  if (c.reshard_after_forward_group_size > 0)
    s << " --reshard-after-forward-group-size " << c.reshard_after_forward_group_size;
  s << " --batch-size " << c.batch_size << " --seq-len " << c.seq_len << " --grad-accum-steps " << c.grad_accum_steps;
  if (c.nodes > 1) s << "   (on each of " << c.nodes << " nodes)";
  return s.str();
}

nlohmann::json plan_json(const Plan& p) {
  const auto& m = p.memory;
  const auto& t = p.time;
  const auto& c = p.config;
  nlohmann::json doc = {
      {"format", "fsdpp.plan"},
      {"version", kPlanVersion},
      {"model",
       {{"name", p.model},
        {"model_type", p.shape.model_type},
        {"parameters", p.shape.parameter_count()},
        {"units", p.shape.units.size()},
        {"layers", p.shape.layers},
        {"hidden", p.shape.hidden},
        {"vocab", p.shape.vocab}}},
      {"config",
       {{"strategy", fsdp::to_string(c.strategy)},
        {"nproc", c.nproc},
        {"nodes", c.nodes},
        {"world_size", c.world_size()},
        {"shard_group_size", c.shard_group_size()},
        {"mixed_precision", c.mixed_precision},
        {"activation_checkpointing", c.activation_checkpointing},
        {"ac_freq", c.ac_freq},
        {"cpu_offload", c.cpu_offload},
        {"prefetch", c.prefetch},
        {"no_reshard_after_forward", c.no_reshard_after_forward},
        {"reshard_after_forward_group_size", c.reshard_after_forward_group_size},
        {"cross_entropy", c.fused_cross_entropy ? "fused" : "composite"},
        {"recompute", c.recompute_skips_summed ? "skips-summed" : "full"},
        {"batch_size", c.batch_size},
        {"seq_len", c.seq_len},
        {"grad_accum_steps", c.grad_accum_steps},
        {"device", c.device.name},
        {"device_memory_bytes", c.device.memory_bytes},
        {"host_memory_bytes", c.host_memory_bytes}}},
      {"persistent_bytes",
       {{"param_shards", m.param_shard_bytes},
        {"padding", m.padding_bytes},
        {"grad_shards", m.grad_shard_bytes},
        {"optimizer_state", m.optimizer_state_bytes},
        {"fp32_master_extra", m.fp32_master_extra_bytes},
        {"offloaded", m.offloaded},
        {"device_after_setup", m.device_persistent_after_setup},
        {"host", m.host_persistent_bytes}}},
      {"transient_bytes",
       {{"prefetch_depth", m.prefetch_depth},
        {"unsharded_block", m.unsharded_unit_bytes},
        {"unsharded_root", m.unsharded_root_bytes},
        {"unsharded_in_flight", m.unsharded_in_flight_bytes},
        {"activations_without_ac", m.activation_bytes_without_ac},
        {"activations_with_ac", m.activation_bytes_with_ac},
        {"activations", m.activation_bytes},
        {"logits", m.logits_bytes},
        {"recompute", m.recompute_bytes},
        {"all_gather_buffer", m.all_gather_buffer_bytes},
        {"reduce_scatter_buffer", m.reduce_scatter_buffer_bytes}}},
      {"peak_bytes",
       {{"at_loss", m.peak_at_loss},
        {"in_backward", m.peak_in_backward},
        {"at_optimizer", m.peak_at_optimizer},
        {"peak", m.peak_bytes},
        {"phase", m.peak_phase}}},
      {"comm_bytes_per_step",
       {{"all_gather", m.comm.all_gather},
        {"reduce_scatter", m.comm.reduce_scatter},
        {"all_reduce", m.comm.all_reduce}}},
      {"fits", p.fits},
      {"fit_reason", p.fit_reason},
  };
  nlohmann::json time = {{"predicted", t.predicted}, {"model_flops_per_token", t.flops_per_token}};
  if (!t.predicted) {
    time["why_not"] = t.why_not;
  } else {
    time.update({{"flops_per_step_per_rank", t.flops_per_step_per_rank},
                 {"compute_ms", t.compute_ms},
                 {"comm_ms", t.comm_ms},
                 {"exposed_comm_ms", t.exposed_comm_ms},
                 {"offload_ms", t.offload_ms},
                 {"step_ms", t.step_ms},
                 {"tokens_per_s", t.tokens_per_s},
                 {"mfu", t.mfu},
                 {"assumptions",
                  {{"matmul_flops_per_s", t.assumptions.matmul_flops_per_s},
                   {"matmul_source", t.assumptions.matmul_source},
                   {"efficiency", t.assumptions.efficiency},
                   {"efficiency_source", t.assumptions.efficiency_source},
                   {"memory_bytes_per_s", t.assumptions.memory_bytes_per_s},
                   {"link_bytes_per_s", t.assumptions.link_bytes_per_s},
                   {"link_source", t.assumptions.link_source}}}});
  }
  doc["step_time"] = time;
  return doc;
}

void check_plan_document(const nlohmann::json& doc, const std::string& source) {
  if (!doc.is_object() || doc.value("format", "") != "fsdpp.plan")
    throw std::invalid_argument(source + ": not an fsdpp.plan document (format must be \"fsdpp.plan\")");
  if (!doc.contains("version") || !doc["version"].is_number_integer() || doc["version"].get<int>() != kPlanVersion)
    throw std::invalid_argument(source + ": fsdpp.plan version " +
                                (doc.contains("version") ? doc["version"].dump() : "missing") +
                                ", this reader understands version " + std::to_string(kPlanVersion));
}

std::string plan_text(const Plan& p) {
  const auto& m = p.memory;
  const auto& t = p.time;
  const auto& c = p.config;
  auto b = [](int64_t v) { return format_bytes(static_cast<double>(v)); };
  std::ostringstream s;
  s << "model " << p.model << " (" << p.shape.model_type << ", " << p.shape.parameter_count() << " parameters, "
    << p.shape.units.size() << " FSDP units)\n";
  s << "config " << fsdp::to_string(c.strategy) << ", " << c.nodes << " x " << c.nproc << " ranks (shard group "
    << c.shard_group_size() << "), " << c.mixed_precision
    << (c.activation_checkpointing ? ", AC every " + std::to_string(c.ac_freq) : ", no AC")
    << (c.cpu_offload ? ", CPU offload" : "") << ", batch " << c.batch_size << " x seq " << c.seq_len << " x accum "
    << c.grad_accum_steps << ", device " << c.device.name << "\n";
  s << "per rank, persistent" << (m.offloaded ? " (in host memory: --cpu-offload)" : "") << ":\n";
  s << "  parameter shards   " << b(m.param_shard_bytes) << " (padding " << b(m.padding_bytes) << ")\n";
  s << "  gradient shards    " << b(m.grad_shard_bytes) << "\n";
  s << "  optimizer state    " << b(m.optimizer_state_bytes) << " (AdamW, fp32)\n";
  s << "  fp32 masters       " << b(m.fp32_master_extra_bytes) << " extra (the shards are the masters)\n";
  s << "per rank, transient:\n";
  s << "  unsharded units    " << b(m.unsharded_in_flight_bytes) << " at the loss; a block "
    << b(m.unsharded_unit_bytes) << ", prefetch depth " << m.prefetch_depth << "\n";
  s << "  activations        " << b(m.activation_bytes) << " (without AC " << b(m.activation_bytes_without_ac)
    << ", with AC " << b(m.activation_bytes_with_ac) << ")\n";
  s << "  logits             " << b(m.logits_bytes) << "\n";
  s << "  all-gather buffer  " << b(m.all_gather_buffer_bytes) << ", reduce-scatter buffer "
    << b(m.reduce_scatter_buffer_bytes) << "\n";
  s << "predicted peak       " << b(m.peak_bytes) << " per device (at the " << m.peak_phase << ")";
  if (c.device.memory_bytes > 0) s << " of " << b(c.device.memory_bytes) << ": " << (p.fits ? "fits" : p.fit_reason);
  s << "\n";
  if (m.offloaded) s << "host memory          " << b(m.host_persistent_bytes) << " per rank\n";
  s << "bytes sent per step  all-gather " << b(m.comm.all_gather) << ", reduce-scatter " << b(m.comm.reduce_scatter)
    << ", all-reduce " << b(m.comm.all_reduce) << "\n";
  if (!t.predicted) {
    s << "step time            not predicted: " << t.why_not << "\n";
  } else {
    char line[512];
    std::snprintf(
        line, sizeof line,
        "step time            %.1f ms (compute %.1f, exposed comm %.1f of %.1f, offload %.1f): %.0f tokens/s, "
        "MFU %.2f vs the assumed matmul rate\n",
        t.step_ms, t.compute_ms, t.exposed_comm_ms, t.comm_ms, t.offload_ms, t.tokens_per_s, t.mfu);
    s << line;
    std::snprintf(line, sizeof line,
                  "  assumed: matmul %.3g FLOP/s (%s); efficiency %.3f (%s); memory %.3g B/s; link %.3g B/s (%s)\n",
                  t.assumptions.matmul_flops_per_s, t.assumptions.matmul_source.c_str(), t.assumptions.efficiency,
                  t.assumptions.efficiency_source.c_str(), t.assumptions.memory_bytes_per_s,
                  t.assumptions.link_bytes_per_s, t.assumptions.link_source.c_str());
    s << line;
  }
  return s.str();
}

}  // namespace fsdpp::plan
