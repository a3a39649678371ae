// Gradient norms, clipping and clearing over lists of tensors: the unsharded model's
// parameters, or FSDP's sharded gradients (ShardedModel::grad_norm folds the ranks).
// Semantics of torch.nn.utils.clip_grad_norm_: total = (sum_i ||g_i||_p^p)^(1/p), or
// max_i max|g_i| for p = inf; coef = max_norm / (total + 1e-6), applied when below 1.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace fsdpp::optim {

// sum_i ||g_i||_p^p over the defined, non-empty tensors (p = inf: the largest |element|),
// in fp64 on the host. Each g_i's norm is taken in its own dtype, as clip_grad_norm_ does;
// one _foreach_norm and one host sync per device and dtype, except 2-norms of contiguous
// fp32 host tensors (CPU training, offloaded shards), which fsdpp's own loop takes on the
// intra-op threads (squares summed in fp64, each norm rounded to fp32).
// Throws std::invalid_argument unless p > 0.
double gradient_power_sum(const std::vector<at::Tensor>& grads, double norm_type);

// clip_grad_norm_'s rule given the total norm: multiplies every defined tensor in place by
// coef = max_norm / (total_norm + 1e-6) when that is below 1 (one _foreach_mul_ per device
// and dtype; contiguous fp32 host tensors by fsdpp's own loop, the same fp32 products);
// leaves them alone otherwise.
void clip_gradients(const std::vector<at::Tensor>& grads, double total_norm, double max_norm);

// torch.nn.utils.clip_grad_norm_ on these parameters' gradients (those without one are
// skipped); returns the total norm. Gradients change only when coef < 1.
double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm, double norm_type = 2.0);

// Drops every parameter's gradient, PyTorch >= 2.0's zero_grad(set_to_none=True), on every
// LibTorch: 1.13's C++ zero_grad() fills zeros instead, which costs a pass over every
// gradient twice (the fill, then the next backward's add) and makes AdamW step a
// parameter that got no gradient.
void clear_gradients(torch::optim::Optimizer& optimizer);

}  // namespace fsdpp::optim
