#include "core/models/rotary.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

namespace fsdpp::models {

RotaryTable::RotaryTable(at::Tensor inv_freq) : inv_freq_(std::move(inv_freq)) {}

std::pair<at::Tensor, at::Tensor> RotaryTable::cos_sin(int64_t seq, c10::Device device, c10::ScalarType dtype) {
  // A table made under InferenceMode is an inference tensor, which autograd may not save
  // for backward: such a table is not reused outside that mode, nor the other way round.
  const bool inference = c10::InferenceMode::is_enabled();
  std::lock_guard<std::mutex> lock(mutex_);
  if (seq != seq_ || device != device_ || dtype != dtype_ || inference != inference_ || !cos_.defined()) {
    c10::NoGradGuard no_grad;
    auto options = at::TensorOptions().device(device).dtype(at::kFloat);
    auto freqs = at::outer(at::arange(seq, options), inv_freq_.to(options));
    auto angles = at::cat({freqs, freqs}, -1);
    cos_ = angles.cos().to(dtype);
    sin_ = angles.sin().to(dtype);
    seq_ = seq;
    device_ = device;
    dtype_ = dtype;
    inference_ = inference;
  }
  return {cos_, sin_};
}

at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t rotated = cos.size(-1);
  if (rotated < x.size(-1)) {  // partial rotary: the rest of each head passes unrotated
    auto parts = x.split({rotated, x.size(-1) - rotated}, -1);
    return at::cat({apply_rotary(parts[0], cos, sin), parts[1]}, -1);
  }
  auto halves = x.chunk(2, -1);
  return x * cos + at::cat({-halves[1], halves[0]}, -1) * sin;
}

}  // namespace fsdpp::models
