// What `fsdpp train` tells its user while it trains: <run>/metrics.jsonl (written by
// MetricsLog, format core/train/METRICS.md) and the lines on stdout (the run's start, a
// step every log_freq steps, checkpoints, evaluations), with a progress bar when a
// terminal is attached (ProgressBar, metrics_log.h).
//
// Contract
// - Rank 0 only: every rank constructs one and makes the same calls; rank 0 writes and
//   prints, the others do nothing. Nothing here is collective.
// - Each stdout line is printed in the progress bar's place and flushed at once.
// - Errors: std::runtime_error from MetricsLog, on rank 0, naming the file (it cannot be
//   created, or a write failed).
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"
#include "core/fsdp/sharded_model.h"
#include "core/runtime/stopwatch.h"
#include "core/train/metrics_log.h"
#include "core/train/train_config.h"
#include "core/train/train_step.h"

namespace fsdpp::train {

// The run as its first record and line describe it (METRICS.md, "kind": "run").
struct RunShape {
  int64_t start_step = 0;  // steps done before this process (a resumed run's checkpoint)
  int world_size = 1;
  std::string model_type;
  int64_t parameters = 0;  // unique tensors' elements
  int64_t seq_len = 0;
  int64_t global_batch = 0;  // windows per step
  int64_t total_steps = 0;
  int64_t train_windows = 0;
};

// The run's second line: the FSDP units the wrap policy made (count, parameters each, the
// root's), the precision (with a note when fp16/bf16 runs on a CPU), CPU offload,
// activation checkpointing and prefetch in force.
std::string setup_line(const TrainConfig& config, const fsdp::ShardedModel& sharded, at::Device device);

// One finished optimizer step (METRICS.md, "kind": "train").
struct StepLog {
  int64_t steps_done = 0;  // 1 for the first
  double lr = 0;
  StepRecord record;  // loss, gradient norm, scaler, phase times
  double step_ms = 0;
  double tokens_per_s = 0;
  int64_t tokens = 0;  // target tokens consumed so far
  double epoch = 0;    // fractional epochs consumed so far
};

class TrainLogger {
 public:
  // Rank 0: creates `metrics_path` with the run record (with `append`, adds it at the end
  // of the existing file: a resumed or restarted run), prints the "training ..." line and
  // shows the progress bar. `device` is the one training runs on (its memory is logged).
  TrainLogger(const comm::Communicator& comm, const std::filesystem::path& metrics_path, const TrainConfig& config,
              const RunShape& run, const fsdp::ShardedModel& sharded, at::Device device, bool append);
  TrainLogger(const TrainLogger&) = delete;
  TrainLogger& operator=(const TrainLogger&) = delete;

  // The progress bar's clock starts: call it just before the first step.
  void begin_steps();

  // Whether step `steps_done` gets a line: the first, every log_freq steps, and the last.
  bool prints(int64_t steps_done) const;

  // The step's record with rank 0's memory and communication figures as they are now, queued
  // until its loss and gradient norm are read: with `read`, every queued step's are read (a
  // host sync where they are on a device; StepRecord::read) and their records written in
  // order, with the lines prints() asks for (the device's memory peaks are reset after each
  // line); then the progress bar.
  void log_step(const StepLog& step, const fsdp::ShardedModel& sharded, bool read);
  // Reads and writes the queued steps now (an evaluation, a checkpoint or the end is due).
  void flush();

  // The loss of the first and of the last step read by this process (NaN before one is).
  double first_loss() const { return first_loss_; }
  double last_loss() const { return last_loss_; }

  // The records of the checkpoints that committed or failed (TrainCheckpointer::
  // take_committed), each with its line and warnings.
  void log_checkpoints(const std::vector<nlohmann::json>& records);

  // One metrics.jsonl record, and one printf-style line, for other components (Evaluator).
  void record(const nlohmann::json& record);
  void print(const char* format, ...) __attribute__((format(printf, 2, 3)));

  // Flushes the queued steps and removes the progress bar: no more steps.
  void finish_steps();

  // Closes metrics.jsonl (fsync) and prints "wrote <hf_dir>": the run is done.
  void close(const std::filesystem::path& hf_dir);

 private:
  bool lead_ = false;
  int64_t log_freq_ = 1, total_steps_ = 0;
  at::Device device_ = at::kCPU;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<ProgressBar> progress_;
  runtime::SteadyClock::time_point steps_start_;
  struct PendingStep {
    StepLog step;
    nlohmann::json record;  // rank 0: the metrics record without its loss and grad_norm
    int64_t peak_rss_bytes;
  };
  std::vector<PendingStep> pending_;
  double first_loss_ = std::nan(""), last_loss_ = std::nan("");
};

}  // namespace fsdpp::train
