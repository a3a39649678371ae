#include "harness/bench/step_profiler.h"

#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/profiler_kineto.h>

#include <filesystem>
#include <set>
#include <stdexcept>

#include "core/compat/torch_compat.h"
#include "core/io/atomic_file.h"

namespace fsdpp::harness {

namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

StepProfiler::StepProfiler(std::string trace_path, bool cuda) : trace_path_(std::move(trace_path)), cuda_(cuda) {}

StepProfiler::~StepProfiler() {
  if (running_) {
    try {
      profiler::disableProfiler();
    } catch (...) {  // a destructor must not throw; the trace is simply not written
    }
  }
}

void StepProfiler::start() {
  if (!active() || running_) return;
  if (profiler::profilerEnabled())
    throw std::runtime_error("--profile-trace " + trace_path_ + ": a profiler is already recording in this process");
  std::set<ActivityType> activities{ActivityType::CPU};
  if (cuda_) activities.insert(ActivityType::CUDA);
  ProfilerConfig config(ProfilerState::KINETO);
  profiler::prepareProfiler(config, activities);
  profiler::enableProfiler(config, activities);
  running_ = true;
}

namespace {

// Kineto's own categories for what it records, by where it ran: a device event is a
// kernel unless its name says copy or set; a host event is an operator unless it is a
// user annotation (RECORD_USER_SCOPE, torch.profiler.record_function).
std::string category_of(const profiler::KinetoEvent& e) {
  const std::string name = e.name();
  if (e.deviceType() != c10::DeviceType::CPU) {
    if (name.rfind("Memcpy", 0) == 0) return "gpu_memcpy";
    if (name.rfind("Memset", 0) == 0) return "gpu_memset";
    return name == kStepScope ? "gpu_user_annotation" : "kernel";
  }
  return e.scope() == static_cast<uint8_t>(at::RecordScope::USER_SCOPE) ? "user_annotation" : "cpu_op";
}

// A Chrome trace of the recorded events, in Kineto's layout, for a LibTorch built without
// Kineto (Debian's 1.13), whose ProfilerResult::save refuses.
void write_trace_of_events(const profiler::ProfilerResult& result, const std::string& path) {
  auto events = nlohmann::json::array();
  for (const auto& e : result.events())
    events.push_back({{"ph", "X"},
                      {"cat", category_of(e)},
                      {"name", e.name()},
                      {"ts", compat::profiler_event_start_us(e)},
                      {"dur", compat::profiler_event_duration_us(e)},
                      {"pid", 0},
                      {"tid", e.startThreadId()}});
  nlohmann::json trace{{"traceEvents", std::move(events)},
                       {"fsdpp", "written from the profiler's events: this LibTorch has no Kineto trace writer"}};
  io::write_file_atomic(path, trace.dump() + "\n");
}

}  // namespace

void StepProfiler::stop_and_save() {
  if (!running_) return;
  running_ = false;
  auto result = profiler::disableProfiler();
  const std::filesystem::path path(trace_path_);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  // Kineto writes the file itself; write beside it and rename, so a reader never sees half.
  const std::string partial = trace_path_ + ".partial";
  try {
    result->save(partial);
  } catch (const c10::Error&) {  // "Saving a trace requires ... Kineto support"
    std::filesystem::remove(partial);
    write_trace_of_events(*result, trace_path_);
    return;
  }
  std::error_code ec;
  if (!std::filesystem::exists(partial, ec) || std::filesystem::file_size(partial, ec) == 0)
    throw std::runtime_error("--profile-trace " + trace_path_ + ": the profiler wrote no trace");
  std::filesystem::rename(partial, path, ec);
  if (ec) throw std::runtime_error("--profile-trace " + trace_path_ + ": " + ec.message());
}

}  // namespace fsdpp::harness
