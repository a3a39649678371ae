#include "core/train/metrics_log.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>

#include "core/io/atomic_file.h"

namespace fsdpp::train {

namespace {

// A resumed run's file keeps each step once: the records of the steps after `start_step`
// (those the interrupted run logged after the checkpoint the rerun resumes from, and a line
// a crash cut short) go, by an atomic rewrite, before the rerun appends its own.
void drop_records_after(const std::filesystem::path& path, int64_t start_step) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error(path.string() + ": cannot read the metrics file to resume it");
  std::string kept;
  for (std::string line; std::getline(in, line);) {
    const auto record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object()) continue;  // cut short by the crash
    if (record.value("kind", "") != "run" && record.contains("step") && record["step"].is_number_integer() &&
        record["step"].get<int64_t>() > start_step)
      continue;
    kept += line + "\n";
  }
  io::write_file_atomic(path, kept);
}

}  // namespace

MetricsLog::MetricsLog(const std::filesystem::path& path, const nlohmann::json& run_record, bool append) : path_(path) {
  std::filesystem::create_directories(path.parent_path());
  if (append) drop_records_after(path, run_record.value("start_step", int64_t{0}));
  file_ = std::fopen(path.c_str(), append ? "a" : "wx");  // x: never truncate an earlier run's metrics
  if (file_ == nullptr)
    throw std::runtime_error(path.string() + ": cannot create the metrics file (" + std::strerror(errno) + ")");
  write(run_record);
}

MetricsLog::~MetricsLog() { close(); }

void MetricsLog::write(const nlohmann::json& record) {
  if (file_ == nullptr) return;
  auto line = record.dump() + "\n";
  if (std::fwrite(line.data(), 1, line.size(), file_) != line.size() || std::fflush(file_) != 0)
    throw std::runtime_error(path_.string() + ": write failed (" + std::strerror(errno) + ")");
}

void MetricsLog::close() {
  if (file_ == nullptr) return;
  std::fflush(file_);
  ::fsync(::fileno(file_));
  std::fclose(file_);
  file_ = nullptr;
}

ProgressBar::ProgressBar(int64_t total_steps) : total_(total_steps) {
  if (::isatty(STDERR_FILENO)) {
    tty_ = stderr;
  } else if (const char* attached = std::getenv("FSDPP_ATTACHED_TTY"); attached && std::string(attached) == "1") {
    tty_ = std::fopen("/dev/tty", "w");
    owns_tty_ = tty_ != nullptr;
  }
}

ProgressBar::~ProgressBar() {
  finish();
  if (owns_tty_) std::fclose(tty_);
}

void ProgressBar::update(int64_t step, double loss, double seconds) {
  if (tty_ == nullptr || total_ <= 0) return;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(kWidth * step / total_);
  const double eta = step > 0 ? seconds / static_cast<double>(step) * static_cast<double>(total_ - step) : 0;
  std::string bar(filled, '=');
  bar.resize(kWidth, ' ');
  std::fprintf(tty_, "\r\033[K[%s] %lld/%lld  loss %.4f  ETA %dm%02ds", bar.c_str(), static_cast<long long>(step),
               static_cast<long long>(total_), loss, static_cast<int>(eta) / 60, static_cast<int>(eta) % 60);
  std::fflush(tty_);
}

void ProgressBar::clear() {
  if (tty_ == nullptr) return;
  std::fputs("\r\033[K", tty_);
  std::fflush(tty_);
}

void ProgressBar::finish() {
  clear();
  total_ = 0;
}

}  // namespace fsdpp::train
