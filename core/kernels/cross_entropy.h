// Summed token cross-entropy with a fused CUDA kernel: the loss and gradient of
// torch::nn::functional::cross_entropy(logits.to(fp32), targets, reduction sum), computed in
// fp32 from logits that stay in their own dtype. The composite makes an fp32 copy of the
// logits, an fp32 log-probability tensor and an fp32 gradient (12 bytes a logit alive at
// its backward); the fused kernels read the logits once forward, once more backward, and
// write the gradient once in the logits' dtype (2 x the logits' bytes alive). The values
// agree with the composite to fp32 round-off (a different summation order): tolerances
// are the fp32 policy's for the loss and the logits' dtype's for the gradient.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace fsdpp::kernels {

// Which loss summed cross-entropy runs on `device` (records and fsdpp plan say it): "fused"
// on CUDA devices in a CUDA build unless FSDPP_FUSED_CROSS_ENTROPY=0 is in the environment
// (read once; for comparing against the composite), else "composite".
const char* cross_entropy_kernel_name(at::Device device);

// Whether fused_summed_cross_entropy takes these logits: the fused kernel on their device,
// 2-D, fp32, bf16 or fp16.
bool has_fused_cross_entropy(const at::Tensor& logits);

// sum_r (logsumexp(x_r) - x_r,t_r) over the rows of `logits` [rows, vocab] whose target
// (`targets`: [rows], integer) is not `ignore_index` (as cross_entropy's ignore_index:
// such rows add 0 and get a zero gradient). A target outside [0, vocab) gives a NaN loss.
// Differentiable with respect to `logits`. Throws std::invalid_argument where
// has_fused_cross_entropy is false or the shapes disagree.
at::Tensor fused_summed_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index = -100);

}  // namespace fsdpp::kernels
