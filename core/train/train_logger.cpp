#include "core/train/train_logger.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "core/runtime/device.h"

namespace fsdpp::train {

namespace {

int64_t peak_rss_bytes() {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

// Bytes this rank sent in each kind of FSDP collective since the last reset_comm_stats.
nlohmann::json comm_bytes_sent(const fsdp::ShardedModel& sharded) {
  nlohmann::json out;
  for (auto kind : {comm::CollectiveKind::AllGather, comm::CollectiveKind::ReduceScatter,
                    comm::CollectiveKind::AllReduce, comm::CollectiveKind::AllToAll})
    out[comm::to_string(kind)] = sharded.comm_stats(kind).bytes_sent;
  return out;
}

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

}  // namespace

std::string setup_line(const TrainConfig& config, const fsdp::ShardedModel& sharded, at::Device device) {
  // The units the wrap policy made: the root last (ShardedModel's creation order).
  int64_t units = 0, smallest = -1, largest = 0, root = 0;
  for (const auto& unit : sharded.units()) {
    int64_t numel = 0;
    for (const auto& p : unit->params()) numel += p.full_numel();
    if (unit.get() == sharded.units().back().get()) {
      root = numel;
      continue;
    }
    ++units;
    smallest = smallest < 0 ? numel : std::min(smallest, numel);
    largest = std::max(largest, numel);
  }
  std::string line = "units: " + std::to_string(units) + " (--wrap-policy " + config.wrap_policy + ")";
  if (units > 0)
    line += smallest == largest ? " of " + with_commas(largest) + " parameters each"
                                : " of " + with_commas(smallest) + " to " + with_commas(largest) + " parameters";
  line += " and the root's " + with_commas(root) + "; precision " + config.mixed_precision;
  if (config.mixed_precision != "fp32" && device.is_cpu())
    line += " (on a CPU, bf16 and fp16 matmuls are usually slower than fp32: use them for memory, not speed)";
  line += "; cpu offload " + std::string(config.cpu_offload ? "on" : "off");
  if (config.grad_accum_steps > 1)
    line += "; gradients reduced " +
            std::string(config.no_sync_accum ? "once per step (--no-sync-accum)" : "after every micro-step");
  line +=
      "; activation checkpointing " +
      (config.activation_checkpointing ? "every " + std::to_string(config.ac_freq) + " block(s)" : std::string("off"));
  const auto& f = config.fsdp;
  if (config.explicit_prefetch > 0) {
    const std::string n = std::to_string(config.explicit_prefetch);
    line += "; prefetch: explicit, the next " + n + " unit(s) in forward and the previous " + n + " in backward";
  } else {
    line += "; prefetch: forward " + std::string(f.forward_prefetch ? "on" : "off") + ", backward " +
            (f.backward_prefetch == fsdp::BackwardPrefetch::None  ? "off"
             : f.backward_prefetch == fsdp::BackwardPrefetch::Pre ? "pre"
                                                                  : "post") +
            ", at most " + std::to_string(f.max_inflight_all_gathers) + " all-gathers in flight";
  }
  if (!config.no_reshard_after_forward.empty()) {
    std::string names;
    for (const auto& [name, module] : units_kept_unsharded(sharded, config))
      names += (names.empty() ? "" : ", ") + name;
    line += "; kept unsharded from forward to backward: " + names;
  }
  if (config.reshard_after_forward_group_size > 0)
    line += "; after forward the other units keep 1/" + std::to_string(config.reshard_after_forward_group_size) +
            " of their parameters and gather in backward over groups of " +
            std::to_string(config.reshard_after_forward_group_size) + " ranks";
  if (f.gradient_divide_factor) {
    char factor[32];
    std::snprintf(factor, sizeof factor, "%g", *f.gradient_divide_factor);
    line += "; gradients: the ranks' sum divided by " + std::string(factor);
  }
  return line;
}

TrainLogger::TrainLogger(const comm::Communicator& comm, const std::filesystem::path& metrics_path,
                         const TrainConfig& config, const RunShape& run, const fsdp::ShardedModel& sharded,
                         at::Device device, bool append)
    : lead_(comm.rank() == 0), log_freq_(config.log_freq), total_steps_(run.total_steps), device_(device) {
  if (!lead_) return;
  auto mem = sharded.memory();
  metrics_ = std::make_unique<MetricsLog>(metrics_path,
                                          nlohmann::json{{"kind", "run"},
                                                         {"format", "fsdpp.metrics"},
                                                         {"version", 1},
                                                         {"start_step", run.start_step},
                                                         {"world_size", run.world_size},
                                                         {"model_type", run.model_type},
                                                         {"parameters", run.parameters},
                                                         {"shard_bytes", mem.shard_bytes},
                                                         {"seq_len", run.seq_len},
                                                         {"global_batch", run.global_batch},
                                                         {"total_steps", run.total_steps},
                                                         {"train_windows", run.train_windows},
                                                         {"config", config.to_json()}},
                                          append);
  std::printf("training %s (%lld parameters) on %d rank(s), %s: %lld steps of %lld windows x %lld tokens\n",
              run.model_type.c_str(), static_cast<long long>(run.parameters), run.world_size,
              fsdp::to_string(config.fsdp.strategy).c_str(), static_cast<long long>(run.total_steps),
              static_cast<long long>(run.global_batch), static_cast<long long>(run.seq_len));
  std::printf("%s\n", setup_line(config, sharded, device).c_str());
  std::fflush(stdout);
  progress_ = std::make_unique<ProgressBar>(run.total_steps);
}

void TrainLogger::begin_steps() { steps_start_ = runtime::SteadyClock::now(); }

bool TrainLogger::prints(int64_t steps_done) const {
  return steps_done % log_freq_ == 0 || steps_done == total_steps_ || steps_done == 1;
}

void TrainLogger::log_step(const StepLog& s, const fsdp::ShardedModel& sharded, bool read) {
  PendingStep pending{s, nlohmann::json(), 0};
  if (lead_) {  // the host's figures as they are now; the loss and the norm once read
    auto mem = sharded.memory();
    const auto device_mem = runtime::device_memory(device_);  // the device training runs on
    pending.peak_rss_bytes = peak_rss_bytes();
    pending.record = {{"kind", "train"},
                      {"step", s.steps_done},
                      {"loss", nullptr},
                      {"lr", s.lr},
                      {"grad_norm", nullptr},
                      {"tokens_per_s", s.tokens_per_s},
                      {"tokens", s.tokens},
                      {"epoch", s.epoch},
                      {"time_ms",
                       {{"data", s.record.data_ms},
                        {"forward", s.record.forward_ms},
                        {"backward", s.record.backward_ms},
                        {"optimizer", s.record.optimizer_ms},
                        {"step", s.step_ms}}},
                      {"memory",
                       {{"peak_rss_bytes", pending.peak_rss_bytes},
                        {"shard_bytes", mem.shard_bytes},
                        {"peak_unsharded_bytes", mem.peak_unsharded_bytes},
                        {"allocated_bytes", device_mem.allocated_bytes},
                        {"reserved_bytes", device_mem.reserved_bytes},
                        {"window_peak_allocated_bytes", device_mem.peak_allocated_bytes},
                        {"window_peak_reserved_bytes", device_mem.peak_reserved_bytes}}},
                      {"comm_bytes_sent", comm_bytes_sent(sharded)},
                      {"optimizer_step", s.record.optimizer_stepped},
                      {"loss_scale", s.record.loss_scale}};
  }
  pending_.push_back(std::move(pending));
  if (read) flush();
  if (lead_)
    progress_->update(s.steps_done, last_loss_,
                      std::chrono::duration<double>(runtime::SteadyClock::now() - steps_start_).count());
}

void TrainLogger::flush() {
  for (auto& p : pending_) {
    p.step.record.read();
    const StepRecord& done = p.step.record;
    if (std::isnan(first_loss_)) first_loss_ = done.loss;
    last_loss_ = done.loss;
    if (!lead_) continue;
    p.record["loss"] = done.loss;
    p.record["grad_norm"] = done.grad_norm;
    metrics_->write(p.record);
    if (!prints(p.step.steps_done)) continue;
    progress_->clear();
    std::printf(
        "step %lld/%lld | loss %.4f | lr %.3e | grad_norm %.3f | %.0f tok/s | %.0f ms "
        "(data %.0f, fwd %.0f, bwd %.0f, opt %.0f) | rss %.0f MiB\n",
        static_cast<long long>(p.step.steps_done), static_cast<long long>(total_steps_), done.loss, p.step.lr,
        done.grad_norm, p.step.tokens_per_s, p.step.step_ms, done.data_ms, done.forward_ms, done.backward_ms,
        done.optimizer_ms, static_cast<double>(p.peak_rss_bytes) / (1 << 20));
    std::fflush(stdout);
    runtime::reset_peak_memory(device_);  // peaks are per logging window, like get_mem_stats
  }
  pending_.clear();
}

void TrainLogger::log_checkpoints(const std::vector<nlohmann::json>& records) {
  if (!lead_) return;
  for (const auto& record : records) {
    metrics_->write(record);
    progress_->clear();
    if (record.contains("error")) {
      std::printf(
          "warning: checkpoint step %lld failed in the background: %s (the next save or the end of "
          "training stops the run)\n",
          static_cast<long long>(record["step"].get<int64_t>()), record["error"].get<std::string>().c_str());
    } else {
      std::printf("checkpoint step %lld -> %s", static_cast<long long>(record["step"].get<int64_t>()),
                  record["dir"].get<std::string>().c_str());
      if (record["async"].get<bool>())
        std::printf(" (written in the background: %.0f ms, training held %.0f ms)", record["save_ms"].get<double>(),
                    record["blocked_ms"].get<double>());
      std::printf("\n");
      for (const auto& w : record["warnings"]) std::printf("warning: %s\n", w.get<std::string>().c_str());
    }
    std::fflush(stdout);
  }
}

void TrainLogger::record(const nlohmann::json& record) {
  if (lead_) metrics_->write(record);
}

void TrainLogger::print(const char* format, ...) {
  if (!lead_) return;
  progress_->clear();
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::fflush(stdout);
}

void TrainLogger::finish_steps() {
  flush();
  if (progress_) progress_->finish();
}

void TrainLogger::close(const std::filesystem::path& hf_dir) {
  if (!lead_) return;
  metrics_->close();
  std::printf("wrote %s\n", hf_dir.string().c_str());
}

}  // namespace fsdpp::train
