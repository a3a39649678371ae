// A linear layer's backward without its forward value, for a recomputation that needs only
// the gradients (see nn::call_summed).
//
// In a checkpoint's recomputation the value of the block's last projection is read by no
// op that backward needs: the block only adds it to the residual stream and returns the
// sum, and neither a matmul's nor an add's backward reads its own output. PyTorch's
// non-reentrant checkpoint (torch.utils.checkpoint, use_reentrant=False) stops the
// recomputation before that matmul for the same reason; this is the same saving for a
// recomputation that must run the block to its end.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace fsdpp::nn {

// How a linear layer stores its weight.
enum class WeightLayout : std::uint8_t {
  OutIn,  // [out, in], y = x W^T + b: torch::nn::Linear (at::linear)
  InOut,  // [in, out], y = x W + b: Hugging Face's Conv1D (at::addmm on x flattened to 2-D)
};

// Returns a tensor shaped like the layer's output y (x's leading dimensions, then out),
// filled with NaN instead of y, so that anything that does read it turns into NaN rather
// than into a silently wrong number. Its backward is the layer's, op for op: the
// gradients it sends to x, the weight and the bias (which may be undefined) are bitwise
// those autograd computes through at::linear (OutIn) or through Conv1D's
// reshape/addmm/view (InOut), with the layouts autograd gives them.
//
// Returns an undefined tensor where it does not promise that: under
// autocast, for x of other than 2 or 3 dimensions, or not contiguous, or of another dtype
// or device than the weight, or for a weight that is not a contiguous matrix. The caller
// then runs the layer's forward.
at::Tensor gradient_only_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias,
                                WeightLayout layout);

}  // namespace fsdpp::nn
