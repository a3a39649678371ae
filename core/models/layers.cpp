#include "core/models/layers.h"

#include <atomic>

#include "core/compat/torch_compat.h"
#include "core/nn/gradient_only_linear.h"

namespace fsdpp::models {

Conv1DImpl::Conv1DImpl(int64_t in, int64_t out) {
  // In place: a part under construction holds its weights once (see nn::DeferredInit).
  weight = register_parameter("weight", torch::randn({in, out}).mul_(0.02));
  bias = register_parameter("bias", torch::zeros({out}));
}

torch::Tensor Conv1DImpl::forward(const torch::Tensor& x) {
  auto flat = x.reshape({-1, x.size(-1)});
  auto sizes = x.sizes().vec();
  sizes.back() = weight.size(1);
  return torch::addmm(bias, flat, weight).view(sizes);
}

torch::Tensor Conv1DImpl::gradient_only_forward(const torch::Tensor& x) {
  return nn::gradient_only_linear(x, weight, bias, nn::WeightLayout::InOut);
}

LmHeadImpl::LmHeadImpl(int64_t dim, int64_t vocab) {
  weight = register_parameter("weight", torch::randn({vocab, dim}).mul_(0.02));  // in place, as Conv1D
}

LmHeadImpl::LmHeadImpl(const torch::Tensor& tied) { weight = register_parameter("weight", tied); }

torch::Tensor LmHeadImpl::forward(const torch::Tensor& x) { return torch::matmul(x, weight.t()); }

RmsNormImpl::RmsNormImpl(int64_t dim, double eps_, bool unit_offset_) : eps(eps_), unit_offset(unit_offset_) {
  weight = register_parameter("weight", unit_offset ? torch::zeros({dim}) : torch::ones({dim}));
}

namespace {

std::atomic<RmsNormKernel> rms_norm_setting{RmsNormKernel::Fused};

bool fused_rms_norm_runs(const at::Device& device) {
  return FSDPP_HAS_FUSED_RMS_NORM && device.is_cuda() && rms_norm_setting.load() == RmsNormKernel::Fused;
}

}  // namespace

void set_rms_norm_kernel(RmsNormKernel kernel) { rms_norm_setting.store(kernel); }
RmsNormKernel rms_norm_kernel() { return rms_norm_setting.load(); }
const char* rms_norm_kernel_name(const at::Device& device) { return fused_rms_norm_runs(device) ? "fused" : "eager"; }

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
#if FSDPP_HAS_FUSED_RMS_NORM
  if (!unit_offset && fused_rms_norm_runs(x.device()) && x.scalar_type() == weight.scalar_type())
    return std::get<0>(at::_fused_rms_norm(x, {weight.size(0)}, weight, eps));
#endif
  auto x32 = x.to(torch::kFloat);
  auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  if (unit_offset) return (normed * (1.0 + weight.to(torch::kFloat))).to(x.scalar_type());
  return weight * normed.to(x.scalar_type());
}

}  // namespace fsdpp::models
