// The one place where LibTorch 1.13 (Debian, CPU) and LibTorch 2.x (CUDA wheels) differ
// for fsdpp. Everything else includes this header instead of testing versions itself.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/version.h>

#include <sstream>
#include <string>
#include <type_traits>

#define FSDPP_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if FSDPP_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

// scaled_dot_product_attention became public in 2.0 (flash / memory-efficient kernels on
// CUDA); 1.13 has only a private variant, so callers use exact math there.
#define FSDPP_HAS_SDPA FSDPP_TORCH_AT_LEAST(2, 0)

// at::_fused_adamw_ (torch.optim.AdamW(fused=True)'s kernel, CUDA) arrived in 2.0.
#define FSDPP_HAS_FUSED_ADAMW FSDPP_TORCH_AT_LEAST(2, 0)

// at::_fused_rms_norm (CUDA kernel with its own backward; torch.nn.RMSNorm's on CUDA) is in
// recent 2.x releases only: present exactly when its operator header is.
#if defined(__has_include)
#if __has_include(<ATen/ops/_fused_rms_norm.h>)
#define FSDPP_HAS_FUSED_RMS_NORM 1
#endif
#endif
#ifndef FSDPP_HAS_FUSED_RMS_NORM
#define FSDPP_HAS_FUSED_RMS_NORM 0
#endif

// 2.4 made autocast's calls per device type; before, each device had its own functions.
#define FSDPP_AUTOCAST_PER_DEVICE FSDPP_TORCH_AT_LEAST(2, 4)

namespace fsdpp::compat {

// The object that runs collectives. 2.x split ProcessGroup into a dispatching
// ProcessGroup and per-device Backends (ProcessGroupGloo/NCCL derive from Backend);
// 1.13's ProcessGroupGloo derives from ProcessGroup. Both expose the same virtuals we
// call: alltoall_base, allreduce, _allgather_base (NCCL), barrier.
#if FSDPP_TORCH_AT_LEAST(2, 0)
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// Handle of an in-flight c10d collective: c10d::Work in both (1.13 already moved it
// out of ProcessGroup into Work.hpp).
using C10dWork = c10d::Work;

inline const char* torch_version_string() { return TORCH_VERSION; }

// Autocast's thread-local state on the CPU and CUDA (FSDPP_AUTOCAST_PER_DEVICE).
struct AutocastState {
  bool cpu_enabled = false, cuda_enabled = false;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  bool any() const { return cpu_enabled || cuda_enabled; }
  // Autocast to `dtype` on `device` only.
  static AutocastState only(at::DeviceType device, at::ScalarType dtype);
};
AutocastState autocast_state();
void set_autocast_state(const AutocastState& state);

// Enters `state` while alive and then restores the state before it. Leaving the outermost
// autocast region clears the cast cache, as torch.autocast's __exit__ does.
class AutocastGuard {
 public:
  explicit AutocastGuard(const AutocastState& state);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  AutocastState previous_;
  bool nested_ = false;
};

// The key of a parameter in torch::optim::Optimizer::state(): c10::guts::to_string of its
// TensorImpl pointer in 1.13, the pointer itself in 2.x. `Map` is the state map's type.
template <typename Map>
typename Map::key_type optimizer_state_key(const Map&, const at::Tensor& param) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream s;
    s << param.unsafeGetTensorImpl();
    return s.str();
  } else {
    return static_cast<Key>(param.unsafeGetTensorImpl());
  }
}

namespace detail {
template <typename Event>
auto start_us(const Event& e, int) -> decltype(static_cast<double>(e.startNs())) {
  return static_cast<double>(e.startNs()) / 1e3;
}
template <typename Event>
double start_us(const Event& e, long) {
  return static_cast<double>(e.startUs());
}
template <typename Event>
auto duration_us(const Event& e, int) -> decltype(static_cast<double>(e.durationNs())) {
  return static_cast<double>(e.durationNs()) / 1e3;
}
template <typename Event>
double duration_us(const Event& e, long) {
  return static_cast<double>(e.durationUs());
}
}  // namespace detail

// A profiler event's (torch::autograd::profiler::KinetoEvent's) start and duration in
// microseconds: 1.13 has startUs()/durationUs(), later versions startNs()/durationNs().
template <typename Event>
double profiler_event_start_us(const Event& e) {
  return detail::start_us(e, 0);
}
template <typename Event>
double profiler_event_duration_us(const Event& e) {
  return detail::duration_us(e, 0);
}

}  // namespace fsdpp::compat
