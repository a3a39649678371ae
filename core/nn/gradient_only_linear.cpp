#include "core/nn/gradient_only_linear.h"

#include <ATen/ATen.h>
#include <ATen/ExpandUtils.h>
#include <torch/csrc/autograd/custom_function.h>

#include <limits>

#include "core/compat/torch_compat.h"

namespace fsdpp::nn {
namespace {

bool column_major(const at::Tensor& m) { return m.stride(0) == 1 && m.stride(1) == m.size(0); }

// The gradients of mm(mat1, mat2) for the output gradient `grad`, as autograd's MmBackward
// and AddmmBackward compute them (torch/csrc/autograd/FunctionsManual.cpp,
// mm_mat1_backward and mm_mat2_backward with alpha 1): a column-major operand gets a
// column-major gradient. Same ops on the same layouts, hence the same bits.
at::Tensor mat1_gradient(const at::Tensor& grad, const at::Tensor& mat1, const at::Tensor& mat2) {
  if (column_major(mat1)) return mat2.mm(grad.t()).t();
  return grad.mm(mat2.t());
}
at::Tensor mat2_gradient(const at::Tensor& grad, const at::Tensor& mat1, const at::Tensor& mat2) {
  if (column_major(mat2)) return grad.t().mm(mat1).t();
  return mat1.t().mm(grad);
}

// Inputs: x, weight, bias (an empty tensor stands for none: autograd's apply takes no
// undefined tensor), the layout. Both forms compute
// mm(x flattened to [rows, in], mat2) (+ bias) and view it back, with mat2 = W^T (OutIn:
// at::linear's matmul or _flatten_nd_linear's addmm) or W (InOut: Conv1D's addmm); the
// flattening and the view back are reshapes, whose backward reshapes the gradient.
struct GradientOnlyLinear : torch::autograd::Function<GradientOnlyLinear> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, int64_t layout) {
    ctx->save_for_backward({x, weight});
    ctx->saved_data["layout"] = layout;
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    auto sizes = x.sizes().vec();
    sizes.back() = static_cast<WeightLayout>(layout) == WeightLayout::OutIn ? weight.size(0) : weight.size(1);
    return at::full(sizes, std::numeric_limits<double>::quiet_NaN(), x.options());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor& x = saved[0];
    const at::Tensor& weight = saved[1];
    const bool out_in = static_cast<WeightLayout>(ctx->saved_data["layout"].toInt()) == WeightLayout::OutIn;
    const at::Tensor& grad = grad_outputs[0];
    at::Tensor grad_x, grad_weight, grad_bias;
    if (grad.defined()) {
      const at::Tensor mat1 = x.reshape({-1, x.size(-1)});
      const at::Tensor mat2 = out_in ? weight.t() : weight;
      const at::Tensor grad_2d = grad.reshape({-1, mat2.size(1)});
      if (ctx->needs_input_grad(0)) grad_x = mat1_gradient(grad_2d, mat1, mat2).reshape(x.sizes());
      if (ctx->needs_input_grad(1)) {
        grad_weight = mat2_gradient(grad_2d, mat1, mat2);
        if (out_in) grad_weight = grad_weight.t();  // weight.t()'s backward
      }
      // addmm's gradient for the bias is the output's, summed over the rows it was
      // broadcast to (the engine's sum_to for an expanded input).
      if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2))
        grad_bias = at::sum_to(grad_2d, at::IntArrayRef{mat2.size(1)});
    }
    return {grad_x, grad_weight, grad_bias, at::Tensor()};
  }
};

}  // namespace

at::Tensor gradient_only_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                WeightLayout layout) {
  if (compat::autocast_state().any()) return {};
  if ((x.dim() != 2 && x.dim() != 3) || !x.is_contiguous()) return {};
  if (weight.dim() != 2 || !weight.is_contiguous() || weight.scalar_type() != x.scalar_type() ||
      weight.device() != x.device())
    return {};
  const int64_t in = layout == WeightLayout::OutIn ? weight.size(1) : weight.size(0);
  const int64_t out = layout == WeightLayout::OutIn ? weight.size(0) : weight.size(1);
  if (x.size(-1) != in) return {};
  if (bias.defined() &&
      (bias.dim() != 1 || bias.size(0) != out || bias.scalar_type() != x.scalar_type() || bias.device() != x.device()))
    return {};
  return GradientOnlyLinear::apply(x, weight, bias.defined() ? bias : at::empty({0}, x.options()),
                                   static_cast<int64_t>(layout));
}

}  // namespace fsdpp::nn
