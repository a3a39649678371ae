#include "core/compat/torch_compat.h"

#include <ATen/autocast_mode.h>

namespace fsdpp::compat {

AutocastState AutocastState::only(at::DeviceType device, at::ScalarType dtype) {
  AutocastState s;
  if (device == at::kCUDA) {
    s.cuda_enabled = true;
    s.cuda_dtype = dtype;
  } else {
    s.cpu_enabled = true;
    s.cpu_dtype = dtype;
  }
  return s;
}

AutocastState autocast_state() {
  AutocastState s;
#if FSDPP_AUTOCAST_PER_DEVICE
  s.cpu_enabled = at::autocast::is_autocast_enabled(at::kCPU);
  s.cuda_enabled = at::autocast::is_autocast_enabled(at::kCUDA);
  s.cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
  s.cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
#else
  s.cpu_enabled = at::autocast::is_cpu_enabled();
  s.cuda_enabled = at::autocast::is_enabled();
  s.cpu_dtype = at::autocast::get_autocast_cpu_dtype();
  s.cuda_dtype = at::autocast::get_autocast_gpu_dtype();
#endif
  return s;
}

void set_autocast_state(const AutocastState& s) {
#if FSDPP_AUTOCAST_PER_DEVICE
  at::autocast::set_autocast_dtype(at::kCPU, s.cpu_dtype);
  at::autocast::set_autocast_dtype(at::kCUDA, s.cuda_dtype);
  at::autocast::set_autocast_enabled(at::kCPU, s.cpu_enabled);
  at::autocast::set_autocast_enabled(at::kCUDA, s.cuda_enabled);
#else
  at::autocast::set_autocast_cpu_dtype(s.cpu_dtype);
  at::autocast::set_autocast_gpu_dtype(s.cuda_dtype);
  at::autocast::set_cpu_enabled(s.cpu_enabled);
  at::autocast::set_enabled(s.cuda_enabled);
#endif
}

AutocastGuard::AutocastGuard(const AutocastState& state) : previous_(autocast_state()) {
  set_autocast_state(state);
  if (state.any()) {
    at::autocast::increment_nesting();
    nested_ = true;
  }
}

AutocastGuard::~AutocastGuard() {
  if (nested_ && at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast_state(previous_);
}

}  // namespace fsdpp::compat
