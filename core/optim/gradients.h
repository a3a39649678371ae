// Gradient norms, clipping and clearing over lists of tensors: the unsharded model's
// parameters, or FSDP's sharded gradients (ShardedModel::grad_norm folds the ranks).
// Semantics of torch.nn.utils.clip_grad_norm_: total = (sum_i ||g_i||_p^p)^(1/p), or
// max_i max|g_i| for p = inf; coef = max_norm / (total + 1e-6), applied when below 1.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace fsdpp::optim {

// sum_i ||g_i||_p^p over the defined, non-empty tensors (p = inf: the largest |element|),
// in fp64, read by the host (one sync where a gradient is on a device). Each g_i's norm is
// taken in its own dtype, as clip_grad_norm_ does: one _foreach_norm per device and dtype,
// except 2-norms of contiguous
// fp32 host tensors (CPU training, offloaded shards), which fsdpp's own loop takes on the
// intra-op threads (squares summed in fp64, each norm rounded to fp32).
// Throws std::invalid_argument unless p > 0.
double gradient_power_sum(const std::vector<at::Tensor>& grads, double norm_type);

// The same sum, bit for bit, without the host reading a device: a 0-dim fp64 tensor, on the
// first accelerator the gradients are on (the CPU if none). Host tensors' parts are summed
// on the host, from host memory (nothing to wait for).
at::Tensor gradient_power_sum_on_device(const std::vector<at::Tensor>& grads, double norm_type);

// sum^(1/p) of gradient_power_sum_on_device's result (p = inf: the sum itself), where it
// is: on the CPU by std::pow, as the double-valued calls compute it.
at::Tensor norm_from_power_sum(const at::Tensor& power_sum, double norm_type);

// The value of a 0-dim tensor as a double, by item(): where the tensor is on a device, a
// host sync.
double host_value(const at::Tensor& scalar);

// clip_grad_norm_'s rule given the total norm: multiplies every defined tensor in place by
// coef = max_norm / (total_norm + 1e-6) when that is below 1 (one _foreach_mul_ per device
// and dtype; contiguous fp32 host tensors by fsdpp's own loop, the same fp32 products);
// leaves them alone otherwise.
void clip_gradients(const std::vector<at::Tensor>& grads, double total_norm, double max_norm);

// The same with the total norm as a 0-dim tensor. Host tensors as above (the norm read from
// host memory); tensors on a device multiplied there by min(coef, 1), as clip_grad_norm_
// does, so that the host reads nothing (x * 1 is x, bit for bit).
void clip_gradients(const std::vector<at::Tensor>& grads, const at::Tensor& total_norm, double max_norm);

// torch.nn.utils.clip_grad_norm_ on these parameters' gradients (those without one are
// skipped); returns the total norm. Gradients change only when coef < 1.
double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm, double norm_type = 2.0);
// The same, returning the total norm as a 0-dim fp64 tensor that the host has not read.
at::Tensor clip_grad_norm_on_device(const std::vector<at::Tensor>& parameters, double max_norm, double norm_type = 2.0);
// The total norm alone (unread, nothing clipped).
at::Tensor grad_norm_on_device(const std::vector<at::Tensor>& parameters, double norm_type = 2.0);

// Drops every parameter's gradient, PyTorch >= 2.0's zero_grad(set_to_none=True), on every
// LibTorch: 1.13's C++ zero_grad() fills zeros instead, which costs a pass over every
// gradient twice (the fill, then the next backward's add) and makes AdamW step a
// parameter that got no gradient.
void clear_gradients(torch::optim::Optimizer& optimizer);

}  // namespace fsdpp::optim
