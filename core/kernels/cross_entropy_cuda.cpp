// The CUDA plugin's fused cross-entropy: the autograd function around the kernels of
// cross_entropy_kernel.cu.
#include "core/kernels/cross_entropy_cuda.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/autograd.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>

#include "core/kernels/cross_entropy_kernel.h"

namespace fsdpp::kernels {

namespace {

bool switched_off() {
  static const bool off = [] {
    const char* v = std::getenv("FSDPP_FUSED_CROSS_ENTROPY");
    return v != nullptr && std::strcmp(v, "0") == 0;
  }();
  return off;
}

LogitDtype logit_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return LogitDtype::Float32;
    case at::kBFloat16: return LogitDtype::BFloat16;
    case at::kHalf: return LogitDtype::Float16;
    default:
      throw std::invalid_argument(std::string("fused_summed_cross_entropy: logits must be fp32, bf16 or fp16, got ") +
                                  c10::toString(t));
  }
}

void check(const std::string& error) {
  if (!error.empty()) throw std::runtime_error("fused_summed_cross_entropy: " + error);
}

void* current_stream(const at::Tensor& on) { return at::cuda::getCurrentCUDAStream(on.device().index()).stream(); }

class FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
 public:
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits, const at::Tensor& targets,
                            int64_t ignore_index) {
    const c10::cuda::CUDAGuard guard(logits.device());
    at::Tensor x = logits.stride(1) == 1 ? logits : logits.contiguous();
    at::Tensor t = targets.to(logits.device(), at::kLong).contiguous();
    const int64_t rows = x.size(0);
    at::Tensor row_loss = at::empty({rows}, x.options().dtype(at::kFloat));
    at::Tensor lse = at::empty({rows}, x.options().dtype(at::kFloat));
    check(cross_entropy_forward(x.data_ptr(), logit_dtype(x.scalar_type()), rows, x.size(1), x.stride(0),
                                t.data_ptr<int64_t>(), ignore_index, row_loss.data_ptr<float>(), lse.data_ptr<float>(),
                                current_stream(x)));
    ctx->save_for_backward({x, t, lse});
    ctx->saved_data["ignore_index"] = ignore_index;
    return row_loss.sum();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& t = saved[1];
    const at::Tensor& lse = saved[2];
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor scale = grad_outputs[0].to(x.device(), at::kFloat).contiguous();
    at::Tensor grad = at::empty({x.size(0), x.size(1)}, x.options());
    check(cross_entropy_backward(x.data_ptr(), logit_dtype(x.scalar_type()), x.size(0), x.size(1), x.stride(0),
                                 t.data_ptr<int64_t>(), ctx->saved_data["ignore_index"].toInt(), lse.data_ptr<float>(),
                                 scale.data_ptr<float>(), grad.data_ptr(), current_stream(x)));
    return {grad, at::Tensor(), at::Tensor()};
  }
};

}  // namespace

namespace cuda {

const char* cross_entropy_kernel_name(at::Device device) {
  return device.is_cuda() && !switched_off() ? "fused" : "composite";
}

bool has_fused_cross_entropy(const at::Tensor& logits) {
  const auto t = logits.scalar_type();
  return std::strcmp(cross_entropy_kernel_name(logits.device()), "fused") == 0 && logits.dim() == 2 &&
         (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
}

at::Tensor fused_summed_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index) {
  if (!has_fused_cross_entropy(logits))
    throw std::invalid_argument("fused_summed_cross_entropy: needs 2-D CUDA logits of fp32, bf16 or fp16, got " +
                                std::to_string(logits.dim()) + "-D " + c10::toString(logits.scalar_type()) + " on " +
                                logits.device().str());
  if (targets.dim() != 1 || targets.size(0) != logits.size(0) || at::isFloatingType(targets.scalar_type()))
    throw std::invalid_argument("fused_summed_cross_entropy: targets must be " + std::to_string(logits.size(0)) +
                                " integer class indices, one per row of the logits");
  return FusedCrossEntropy::apply(logits, targets, ignore_index);
}

}  // namespace cuda

}  // namespace fsdpp::kernels
