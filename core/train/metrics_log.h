// metrics.jsonl: one JSON object per line, flushed line by line so a crashed run keeps
// every record written (format: core/train/METRICS.md). Only rank 0 writes one.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>

namespace fsdpp::train {

class MetricsLog {
 public:
  // Creates the file (which must not exist) and writes the run record first; with
  // `append` (a resumed run) the file must exist: its records of steps after the run
  // record's start_step are dropped (atomically), then the record is added at its end.
  MetricsLog(const std::filesystem::path& path, const nlohmann::json& run_record, bool append = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  void write(const nlohmann::json& record);
  // fsyncs; called by the destructor too.
  void close();

 private:
  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// A one-line progress bar with ETA on a terminal: stderr if it is one, else the
// controlling terminal when the launcher says the user is attached to one
// (FSDPP_ATTACHED_TTY=1). Silent otherwise.
class ProgressBar {
 public:
  explicit ProgressBar(int64_t total_steps);
  ~ProgressBar();
  void update(int64_t step, double loss, double seconds_elapsed);
  // Clears the bar so a log line can be printed in its place.
  void clear();
  void finish();

 private:
  std::FILE* tty_ = nullptr;
  bool owns_tty_ = false;
  int64_t total_ = 0;
};

}  // namespace fsdpp::train
