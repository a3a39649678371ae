// Progress of a long task (data prepare's tokenizing, an evaluation) on a stream, stderr by
// default, so that what a command prints on stdout (a summary, --json) is never mixed with
// it: on a terminal one line rewritten in place; otherwise a line at each tenth of the work
// (logs and CI keep every line, so they get few). With `quiet_s`, nothing is printed until
// the task has run that long: a task that ends sooner stays silent.
//
// Contract
// - update() is called from one thread with the work done so far (non-decreasing), the
//   total, the seconds since the task began and a detail that ends the line.
// - Lines: "<label>: <done>/<total> <unit>  <detail>" in place on a terminal;
//   "<label>: <p>%  <done>/<total> <unit>  <detail>" otherwise, p = 10, 20, ..., 100 (a tenth
//   passed while quiet is printed with the next update after quiet_s).
// - The destructor ends an in-place line with a newline. Nothing here throws.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>

namespace fsdpp::runtime {

class ProgressLine {
 public:
  // `out`: the stream; `in_place`: rewrite one line (a terminal) rather than print tenths.
  ProgressLine(std::string label, std::string unit, double quiet_s, std::FILE* out, bool in_place)
      : label_(std::move(label)), unit_(std::move(unit)), quiet_s_(quiet_s), out_(out), in_place_(in_place) {}
  // On stderr, in place when stderr is a terminal.
  ProgressLine(std::string label, std::string unit, double quiet_s = 0)
      : ProgressLine(std::move(label), std::move(unit), quiet_s, stderr, ::isatty(::fileno(stderr)) != 0) {}
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  void update(int64_t done, int64_t total, double seconds, const std::string& detail) {
    if (seconds < quiet_s_) return;
    if (in_place_) {
      std::fprintf(out_, "\r%s: %lld/%lld %s  %s   ", label_.c_str(), static_cast<long long>(done),
                   static_cast<long long>(total), unit_.c_str(), detail.c_str());
      std::fflush(out_);
      wrote_in_place_ = true;
      return;
    }
    const int64_t tenth = total > 0 ? done * 10 / total : 10;
    if (tenth <= last_tenth_) return;
    last_tenth_ = tenth;
    const int64_t percent = tenth * 10;
    std::fprintf(out_, "%s: %3lld%%  %lld/%lld %s  %s\n", label_.c_str(), static_cast<long long>(percent),
                 static_cast<long long>(done), static_cast<long long>(total), unit_.c_str(), detail.c_str());
    std::fflush(out_);
  }

  ~ProgressLine() {
    if (wrote_in_place_) std::fputc('\n', out_);
  }

 private:
  std::string label_, unit_;
  double quiet_s_;
  std::FILE* out_;
  bool in_place_;
  bool wrote_in_place_ = false;
  int64_t last_tenth_ = 0;  // first line at 10%
};

}  // namespace fsdpp::runtime
