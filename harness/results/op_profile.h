// Where a profiled step's time goes: a Kineto Chrome trace (`fsdpp bench-step
// --profile-trace`, `torch_peer.py --profile-trace`; harness/bench/step_profiler.h) summed
// by event category and name, per profiled step, and several such summaries side by side.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace fsdpp::results {

struct OpTotal {
  std::string category;  // Kineto's "cat", lower-cased: kernel, gpu_memcpy, cpu_op, ...
  std::string name;
  long long count = 0;
  double total_us = 0;
};

struct OpProfile {
  std::string source;
  // The "fsdpp.step" user annotations: how many steps the trace covers, and their time.
  int steps = 0;
  double steps_us = 0;
  std::map<std::string, double> category_us;  // every complete event's duration, by category
  std::vector<OpTotal> ops;                   // by (category, name); largest total first
};

// Reads one trace. Throws std::runtime_error naming `path` when it cannot be read, is not
// a Chrome trace (no traceEvents array), or holds no "fsdpp.step" annotation.
OpProfile read_op_profile(const std::string& path);

// Markdown: each profile's step time and per-category time per step, then the `top` names
// of `category` with the most time per step in any profile, each profile's ms per step
// and calls per step, and every profile's ratio to the first. Durations of nested events
// (cpu_op inside cpu_op) count in each; device kernels on one stream do not overlap.
std::string profile_table(const std::vector<OpProfile>& profiles, const std::string& category, int top);

// "kernel" when any profile has device kernels, else "cpu_op".
std::string default_profile_category(const std::vector<OpProfile>& profiles);

}  // namespace fsdpp::results
