// PyTorch's profiler (Kineto) around a benchmark's timed steps, written as a Chrome trace.
//
// `fsdpp bench-step --profile-trace FILE` and `torch_peer.py --profile-trace FILE` record
// the same things the same way: CPU operators, and on CUDA the kernels, copies and memsets
// of the timed steps, each step inside a user annotation named "fsdpp.step" (kStepScope).
// So one reader (harness/results/op_profile.h, `fsdpp results profile`) can put fsdpp's and
// PyTorch's device time side by side, kernel by kernel and per step.
#pragma once

#include <string>

namespace fsdpp::harness {

// The user annotation around each profiled step, in both systems' traces.
inline constexpr const char* kStepScope = "fsdpp.step";

class StepProfiler {
 public:
  // Records CPU operators, and with `cuda` the CUDA activity too. An empty path: inactive
  // (every call does nothing).
  StepProfiler(std::string trace_path, bool cuda);
  ~StepProfiler();  // stops a recording that is still on, writing nothing
  StepProfiler(const StepProfiler&) = delete;
  StepProfiler& operator=(const StepProfiler&) = delete;

  bool active() const { return !trace_path_.empty(); }
  // Starts recording (once). Throws std::runtime_error if a profiler is already on.
  void start();
  // Stops and writes the trace to the path (Kineto's Chrome trace JSON). Throws
  // std::runtime_error naming the path when it cannot be written.
  void stop_and_save();

 private:
  std::string trace_path_;
  bool cuda_;
  bool running_ = false;
};

}  // namespace fsdpp::harness
