#include "harness/bench/cell_result.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>

#include "harness/results/stats.h"

namespace fsdpp::harness {

namespace {

using json = nlohmann::json;

json metric(std::optional<double> value, const char* unit, const char* better) {
  return {{"value", value ? json(*value) : json(nullptr)}, {"unit", unit}, {"better", better}};
}

json sample(const std::vector<double>& values, const char* unit, const char* better) {
  return {{"unit", unit}, {"better", better}, {"values", values}};
}

std::optional<double> number_at(const json& j, const json::json_pointer& p) {
  if (!j.contains(p)) return std::nullopt;
  const auto& v = j.at(p);
  if (!v.is_number()) return std::nullopt;
  return v.get<double>();
}

std::optional<double> median_of(const std::vector<std::optional<double>>& values) {
  std::vector<double> present;
  for (const auto& v : values)
    if (v) present.push_back(*v);
  if (present.empty()) return std::nullopt;
  return results::median(present);
}

std::optional<double> max_of(const std::vector<std::optional<double>>& values) {
  std::optional<double> out;
  for (const auto& v : values)
    if (v && (!out || *v > *out)) out = v;
  return out;
}

// Per repetition, a number from the repetition's record.
std::vector<std::optional<double>> per_repetition(const CellOutcome& o, const std::string& pointer) {
  std::vector<std::optional<double>> out;
  for (const auto& r : o.repetitions) out.push_back(number_at(r.record, json::json_pointer(pointer)));
  return out;
}

// The largest rank's peak memory in one repetition of a peer (torch_peer.py's record).
std::optional<double> peer_peak_bytes(const json& record, const std::string& device) {
  if (!record.contains("memory") || !record["memory"].contains("per_rank")) return std::nullopt;
  const char* key = device == "cuda" ? "max_memory_allocated_bytes" : "peak_rss_measured_bytes";
  std::optional<double> out;
  for (const auto& rank : record["memory"]["per_rank"]) {
    if (!rank.contains(key) || !rank[key].is_number()) return std::nullopt;  // a rank unmeasured: unknown
    double v = rank[key].get<double>();
    if (!out || v > *out) out = v;
  }
  return out;
}

// The device named in the repetitions' records (fsdpp's and the peers' `device_name`),
// when every repetition names the same one.
std::optional<std::string> device_name_of(const CellOutcome& o) {
  std::optional<std::string> name;
  for (const auto& r : o.repetitions) {
    if (!r.record.contains("device_name") || !r.record["device_name"].is_string()) return std::nullopt;
    const auto here = r.record["device_name"].get<std::string>();
    if (name && *name != here) return std::nullopt;
    name = here;
  }
  return name;
}

struct Measured {
  std::vector<double> step_ms;       // pooled
  std::vector<double> tokens_per_s;  // per repetition
  double step_ms_median = 0;
  double tokens_per_s_median = 0;
};

Measured measure(const CellOutcome& o) {
  Measured m;
  const double tokens_per_step = static_cast<double>(o.cell.global_batch() * o.cell.model.seq_len);
  for (size_t r = 0; r < o.repetitions.size(); ++r) {
    const auto& steps = o.repetitions[r].step_ms;
    m.step_ms.insert(m.step_ms.end(), steps.begin(), steps.end());
    m.tokens_per_s.push_back(tokens_per_step * static_cast<double>(steps.size()) / o.repetition_seconds.at(r));
  }
  m.step_ms_median = results::median(m.step_ms);
  m.tokens_per_s_median = results::median(m.tokens_per_s);
  return m;
}

// Per repetition, the largest rank's peak memory during the timed steps: fsdpp's record
// (CUDA: tensors' peak allocated; CPU: the resident set's peak, as the peers measure it),
// or torch_peer.py's (peer_peak_bytes).
std::vector<std::optional<double>> peak_bytes_per_repetition(const CellOutcome& o) {
  if (o.cell.system == System::Fsdpp)
    return per_repetition(o, o.device == "cuda" ? "/memory_bytes/max_over_ranks/peak_allocated"
                                                : "/memory_bytes/max_over_ranks/rss_peak");
  std::vector<std::optional<double>> out;
  for (const auto& r : o.repetitions) out.push_back(peer_peak_bytes(r.record, o.device));
  return out;
}

// Per repetition, the logged loss of every timed step (both systems record "losses": the
// mean over ranks). Empty where a record has none.
std::vector<std::vector<double>> losses_per_repetition(const CellOutcome& o) {
  std::vector<std::vector<double>> out;
  for (const auto& r : o.repetitions) {
    if (!r.record.contains("losses") || !r.record["losses"].is_array()) return {};
    out.push_back(r.record["losses"].get<std::vector<double>>());
  }
  return out;
}

// Whether a peer's repetitions started from fsdpp's initial weights on its batches
// (torch_peer.py --weights ... --fixed-batch, cell_run.h peer_shares_fsdpp_init).
bool started_as_fsdpp(const CellOutcome& peer) {
  if (peer.repetitions.empty()) return false;
  for (const auto& r : peer.repetitions) {
    const json::json_pointer weights("/config/weights"), fixed("/config/fixed_batch");
    if (!r.record.contains(weights) || !r.record.at(weights).is_string() || !r.record.contains(fixed) ||
        r.record.at(fixed) != true)
      return false;
  }
  return true;
}

// The largest |fsdpp loss - peer loss| over the timed steps of every repetition pair
// (repetition r of each), or nullopt when they did not start alike or a loss is missing.
// Alike means the same weights and the same batches: the peer started as fsdpp, on as many
// ranks with as many sequences each (a 1-process peer's batch is the unsharded cell's, not
// the concatenation of the sharded cell's ranks' batches).
std::optional<double> loss_max_abs_diff(const CellOutcome& fsdpp, const CellOutcome& peer) {
  if (!started_as_fsdpp(peer) || peer.cell.world_size != fsdpp.cell.world_size ||
      peer.cell.batch_per_rank != fsdpp.cell.batch_per_rank)
    return std::nullopt;
  const auto ours = losses_per_repetition(fsdpp), theirs = losses_per_repetition(peer);
  if (ours.empty() || ours.size() != theirs.size()) return std::nullopt;
  double worst = 0;
  for (size_t r = 0; r < ours.size(); ++r) {
    if (ours[r].size() != theirs[r].size() || ours[r].empty()) return std::nullopt;
    for (size_t i = 0; i < ours[r].size(); ++i) worst = std::max(worst, std::abs(ours[r][i] - theirs[r][i]));
  }
  return worst;
}

// config[key] = the first repetition record's value at `pointer`, if any record has one.
void copy_first_recorded(const CellOutcome& o, const char* pointer, const char* key, json& config) {
  const json::json_pointer at(pointer);
  for (const auto& r : o.repetitions) {
    if (r.record.contains(at)) {
      config[key] = r.record.at(at);
      return;
    }
  }
}

json config_of(const CellOutcome& o, std::optional<double> parameters) {
  const auto& c = o.cell;
  json config = {{"model_type", c.model.model_type},
                 {"model_size", c.model.size},
                 {"parameters", parameters ? json(static_cast<int64_t>(*parameters)) : json(nullptr)},
                 {"vocab_size", c.model.vocab_size},
                 {"seq_len", c.model.seq_len},
                 {"batch_per_rank", c.batch_per_rank},
                 {"global_batch", c.global_batch()},
                 {"world_size", c.world_size},
                 {"strategy", c.strategy},
                 {"mixed_precision", c.mixed_precision},
                 {"prefetch", c.prefetch},
                 {"activation_checkpointing", c.activation_checkpointing},
                 {"cpu_offload", c.cpu_offload},
                 {"deterministic", c.deterministic},
                 {"warmup_steps", c.model.warmup_steps},
                 {"timed_steps", c.model.timed_steps},
                 {"repetitions", o.repetitions_requested},
                 {"device", o.device},
                 {"threads_per_rank", o.threads_per_rank},
                 {"cpu_binding", o.cores_bound ? "cores" : "none"},
                 {"injected_delay_pct", o.injected_delay_pct}};
  // How AdamW stepped: fsdpp's record says "fused", "fused-cpu", "fused+fused-cpu" or
  // "per-tensor" (optim::step_implementation); a peer's gives its --adam-impl ("fused" on
  // CUDA, "foreach" on the CPU; older records "auto": PyTorch's default).
  copy_first_recorded(o, c.system == System::Fsdpp ? "/adamw_step" : "/config/adam_impl", "adamw_step", config);
  // fsdpp's heap policy (runtime/host_memory.h): "kept" or "glibc"; peers run glibc's.
  copy_first_recorded(o, "/host_heap", "host_heap", config);
  // Llama's RMSNorm, as each system recorded it: "fused" (PyTorch's kernel) or "eager".
  copy_first_recorded(o, "/rms_norm", "rms_norm", config);
  // The loss: "fused" (fsdpp's CUDA kernel, core/kernels/cross_entropy.h) or "composite"
  // (cross_entropy on an fp32 copy of the logits); documents before 2026-11-27 lack it.
  copy_first_recorded(o, "/cross_entropy", "cross_entropy", config);
  // With AC, fsdpp's recomputation: "skips-summed" (nn::call_summed skips each block's last
  // projection) or "full"; documents before 2026-11-27 (3) lack it: full.
  copy_first_recorded(o, "/recompute", "recompute", config);
  // Peers of the families torch_peer.py trains as transformers' own model class: which
  // class and version ran, and a mixture of experts' experts kernel.
  copy_first_recorded(o, "/model_class", "model_class", config);
  copy_first_recorded(o, "/experts_implementation", "experts_implementation", config);
  if (c.strategy.rfind("hybrid", 0) == 0)
    copy_first_recorded(o, "/config/hybrid_shard_size", "hybrid_shard_size", config);
  if (c.system != System::Fsdpp) config["started_as_fsdpp"] = started_as_fsdpp(o);
  return config;
}

// What a cell's comparisons need from the other cells: the step times and tokens/s of every
// ok cell by id, and parameters and FLOPs per token by model.
struct MatrixMeasurements {
  std::map<std::string, Measured> measured;
  std::map<std::string, double> parameters_by_model, flops_per_token_by_model;

  static MatrixMeasurements of(const std::vector<CellOutcome>& outcomes) {
    MatrixMeasurements all;
    for (const auto& o : outcomes) {
      if (o.status != "ok") continue;
      all.measured[o.cell.id()] = measure(o);
      for (const auto& r : o.repetitions) {
        if (auto p = number_at(r.record, json::json_pointer("/parameters")))
          all.parameters_by_model[o.cell.model.name()] = *p;
        if (o.cell.system == System::Fsdpp)
          if (auto f = number_at(r.record, json::json_pointer("/model_flops_per_token")))
            all.flops_per_token_by_model[o.cell.model.name()] = *f;
      }
    }
    return all;
  }
  std::optional<double> parameters(const std::string& model) const { return lookup(parameters_by_model, model); }
  std::optional<double> flops_per_token(const std::string& model) const {
    return lookup(flops_per_token_by_model, model);
  }

 private:
  static std::optional<double> lookup(const std::map<std::string, double>& m, const std::string& key) {
    auto it = m.find(key);
    return it == m.end() ? std::nullopt : std::optional<double>(it->second);
  }
};

// samples.step_ms, tokens_per_s, loss (every logged step of every repetition) and, with an
// injected delay, injected_delay_ms; the step-time and throughput metrics.
void add_time_and_loss(const CellOutcome& o, const Measured& m, json& samples, json& metrics) {
  samples["step_ms"] = sample(m.step_ms, "ms", "lower");
  samples["tokens_per_s"] = sample(m.tokens_per_s, "tokens/s", "higher");
  if (auto losses = losses_per_repetition(o); !losses.empty()) {
    std::vector<double> pooled;
    for (const auto& l : losses) pooled.insert(pooled.end(), l.begin(), l.end());
    samples["loss"] = sample(pooled, "nats", "none");
  }
  if (o.injected_delay_pct > 0) {  // rank 0's requested sleep inside each timed step
    std::vector<double> injected;
    for (const auto& r : o.repetitions)
      if (r.record.contains("injected_delay_ms"))
        for (const auto& v : r.record["injected_delay_ms"]) injected.push_back(v.get<double>());
    samples["injected_delay_ms"] = sample(injected, "ms", "none");
  }
  metrics["step_ms_median"] = metric(m.step_ms_median, "ms", "lower");
  metrics["step_ms_min"] = metric(*std::min_element(m.step_ms.begin(), m.step_ms.end()), "ms", "lower");
  metrics["step_ms_iqr"] = metric(results::iqr(m.step_ms), "ms", "lower");
  metrics["step_ms_cv"] = metric(results::cv(m.step_ms), "fraction", "lower");
  metrics["tokens_per_s"] = metric(m.tokens_per_s_median, "tokens/s", "higher");
}

// Achieved FLOP/s, the matmul peak and MFU, and the peak memory (samples.peak_bytes_per_rank
// when every repetition recorded it). Returns peak_bytes_per_rank, which the FSDP2
// comparison divides.
std::optional<double> add_compute_and_memory(const CellOutcome& o, const Measured& m,
                                             std::optional<double> flops_per_token, json& samples, json& metrics) {
  const auto& c = o.cell;
  const double ranks = c.world_size;
  std::optional<double> achieved, peak, peak_bytes;
  if (flops_per_token) achieved = *flops_per_token * m.tokens_per_s_median / ranks;
  const auto peak_bytes_per_rep = peak_bytes_per_repetition(o);
  peak =
      median_of(per_repetition(o, c.system == System::Fsdpp ? "/matmul_peak_flops_per_s" : "/matmul_peak/flops_per_s"));
  peak_bytes = max_of(peak_bytes_per_rep);
  if (std::all_of(peak_bytes_per_rep.begin(), peak_bytes_per_rep.end(), [](const auto& v) { return v.has_value(); })) {
    std::vector<double> values;
    values.reserve(peak_bytes_per_rep.size());
    for (const auto& v : peak_bytes_per_rep) values.push_back(*v);
    samples["peak_bytes_per_rank"] = sample(values, "bytes", "lower");
  }
  metrics["achieved_flops_per_s"] = metric(achieved, "FLOP/s per rank", "higher");
  metrics["matmul_peak_flops_per_s"] = metric(peak, "FLOP/s per rank", "none");
  metrics["mfu"] = metric(achieved && peak && *peak > 0 ? std::optional<double>(*achieved / *peak) : std::nullopt,
                          "fraction", "higher");
  const auto device = device_name_of(o);
  const auto datasheet =
      c.mixed_precision == "bf16" && device ? datasheet_bf16_flops_per_s(*device) : std::optional<double>();
  metrics["datasheet_peak_flops_per_s"] = metric(datasheet, "FLOP/s per rank", "none");
  metrics["mfu_datasheet"] = metric(
      achieved && datasheet ? std::optional<double>(*achieved / *datasheet) : std::nullopt, "fraction", "higher");
  metrics["peak_bytes_per_rank"] = metric(peak_bytes, "bytes", "lower");
  return peak_bytes;
}

// fsdpp cells: persistent memory (CUDA: tensors; CPU: the resident set), the tensor bytes
// after setup and their peak on either device (CPU: the counting allocator's), bytes sent
// per collective kind, communication time and the fraction of it the training thread
// waited for.
void add_fsdpp_memory_and_comm(const CellOutcome& o, json& metrics) {
  metrics["persistent_bytes_per_rank"] =
      metric(median_of(per_repetition(o, o.device == "cuda" ? "/memory_bytes/max_over_ranks/persistent_between_steps"
                                                            : "/memory_bytes/max_over_ranks/rss_between_steps")),
             "bytes", "lower");
  metrics["persistent_after_setup_bytes_per_rank"] =
      metric(median_of(per_repetition(o, "/memory_bytes/max_over_ranks/persistent_after_setup")), "bytes", "lower");
  metrics["peak_allocated_bytes_per_rank"] =
      metric(max_of(per_repetition(o, "/memory_bytes/max_over_ranks/peak_allocated")), "bytes", "lower");
  for (const char* kind : {"all_gather", "reduce_scatter", "all_reduce"})
    metrics[std::string("comm_bytes_per_step_") + kind] =
        metric(median_of(per_repetition(o, std::string("/comm/") + kind + "/bytes_sent_per_step")), "bytes", "lower");
  metrics["comm_ms_per_step"] = metric(median_of(per_repetition(o, "/comm_ms_per_step")), "ms", "lower");
  double busy = 0, exposed = 0;
  for (const auto& r : o.repetitions) {
    busy += number_at(r.record, json::json_pointer("/comm_ms_per_step")).value_or(0);
    exposed += number_at(r.record, json::json_pointer("/exposed_comm_ms_per_step")).value_or(0);
  }
  metrics["exposed_comm_fraction"] =
      metric(busy > 0 ? std::optional<double>(exposed / busy) : std::nullopt, "fraction", "lower");
}

// fsdpp cells: the step time against the unsharded baseline, tokens/s against each matching
// peer that ran ok, peak memory against FSDP2's, and how far the loss curves are apart.
void add_comparisons(const CellOutcome& o, const Measured& m, std::optional<double> peak_bytes,
                     const std::vector<CellOutcome>& outcomes, const MatrixMeasurements& all, json& metrics) {
  const auto& c = o.cell;
  std::optional<double> overhead;
  if (auto base = unsharded_baseline(c)) {
    auto it = all.measured.find(base->id());
    if (it != all.measured.end()) overhead = m.step_ms_median / it->second.step_ms_median;
  }
  metrics["overhead_vs_unsharded"] = metric(overhead, "ratio", "lower");
  std::optional<double> vs_ddp, vs_single, vs_fsdp2, peak_vs_fsdp2;
  std::map<System, std::optional<double>> loss_diff;
  for (const auto& peer : outcomes) {
    if (peer.status != "ok" || !peer_matches(peer.cell, c)) continue;
    double ratio = m.tokens_per_s_median / all.measured.at(peer.cell.id()).tokens_per_s_median;
    loss_diff[peer.cell.system] = loss_max_abs_diff(o, peer);
    switch (peer.cell.system) {
      case System::PytorchDdp: vs_ddp = ratio; break;
      case System::PytorchSingle: vs_single = ratio; break;
      case System::PytorchFsdp2: {
        vs_fsdp2 = ratio;
        auto theirs = max_of(peak_bytes_per_repetition(peer));
        if (peak_bytes && theirs && *theirs > 0) peak_vs_fsdp2 = *peak_bytes / *theirs;
        break;
      }
      case System::Fsdpp: break;
    }
  }
  metrics["tokens_per_s_ratio_vs_pytorch_ddp"] = metric(vs_ddp, "ratio", "higher");
  metrics["tokens_per_s_ratio_vs_pytorch_single"] = metric(vs_single, "ratio", "higher");
  metrics["tokens_per_s_ratio_vs_pytorch_fsdp2"] = metric(vs_fsdp2, "ratio", "higher");
  metrics["peak_bytes_ratio_vs_pytorch_fsdp2"] = metric(peak_vs_fsdp2, "ratio", "lower");
  // Same initial weights, batches and optimizer (peers started as fsdpp): how far the
  // loss curves are apart, the largest difference of one step's logged loss.
  for (auto peer : {System::PytorchDdp, System::PytorchSingle, System::PytorchFsdp2})
    metrics[std::string("loss_max_abs_diff_vs_") + to_string(peer)] = metric(loss_diff[peer], "nats", "lower");
}

// One outcome as a cell of the document: id, system, config, status, and for an ok cell its
// samples and metrics (a cell that did not run has empty ones and its reason).
json result_cell(const CellOutcome& o, const std::vector<CellOutcome>& outcomes, const MatrixMeasurements& all) {
  const auto& c = o.cell;
  json cell = {
      {"id", c.id()},       {"system", to_string(c.system)}, {"config", config_of(o, all.parameters(c.model.name()))},
      {"status", o.status}, {"samples", json::object()},     {"metrics", json::object()}};
  if (o.status != "ok") {
    cell["reason"] = o.reason;
    return cell;
  }
  const Measured& m = all.measured.at(c.id());
  auto& samples = cell["samples"];
  auto& metrics = cell["metrics"];
  add_time_and_loss(o, m, samples, metrics);
  const auto peak_bytes = add_compute_and_memory(o, m, all.flops_per_token(c.model.name()), samples, metrics);
  if (c.system == System::Fsdpp) {
    add_fsdpp_memory_and_comm(o, metrics);
    add_comparisons(o, m, peak_bytes, outcomes, all, metrics);
  }
  return cell;
}

}  // namespace

std::optional<double> datasheet_bf16_flops_per_s(const std::string& device_name) {
  // torchtitan's get_peak_flops (torchtitan/tools/utils.py): dense bf16 tensor-core peaks
  // from the vendors' datasheets, matched on the name torch.cuda.get_device_name gives.
  // The more specific names come first ("H100 PCIe" before "H100").
  static const std::vector<std::pair<const char*, double>> kPeaks = {
      {"H200 NVL", 836e12}, {"H100 NVL", 835e12}, {"H100 PCIe", 756e12}, {"H200", 989e12},
      {"H100", 989e12},     {"A100", 312e12},     {"B200", 2250e12},     {"L40S", 362e12}};
  for (const auto& [needle, peak] : kPeaks)
    if (device_name.find(needle) != std::string::npos) return peak;
  return std::nullopt;
}

json results_cells(const std::vector<CellOutcome>& outcomes) {
  const auto all = MatrixMeasurements::of(outcomes);
  json cells = json::array();
  for (const auto& o : outcomes) cells.push_back(result_cell(o, outcomes, all));
  return cells;
}

}  // namespace fsdpp::harness
