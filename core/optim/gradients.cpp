#include "core/optim/gradients.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>
#include <tuple>

namespace fsdpp::optim {

namespace {

// The defined, non-empty tensors, grouped by device and dtype: what one foreach call (and
// its multi-tensor kernel on CUDA) takes.
using Groups = std::map<std::tuple<int, int, int>, std::vector<at::Tensor>>;

Groups by_device_and_dtype(const std::vector<at::Tensor>& tensors) {
  Groups groups;
  for (const auto& t : tensors)
    if (t.defined() && t.numel() > 0)
      groups[{static_cast<int>(t.device().type()), t.device().index(), static_cast<int>(t.scalar_type())}].push_back(
          t.detach());
  return groups;
}

}  // namespace

double gradient_power_sum(const std::vector<at::Tensor>& grads, double norm_type) {
  if (!(norm_type > 0)) throw std::invalid_argument("gradient norm: norm_type must be > 0 or inf");
  const bool inf = std::isinf(norm_type);
  double result = 0;
  for (auto& [device, group] : by_device_and_dtype(grads)) {
    auto norms = at::stack(at::_foreach_norm(group, norm_type)).to(at::kDouble);
    const double part = inf ? norms.max().item<double>() : norms.pow(norm_type).sum().item<double>();
    result = inf ? std::max(result, part) : result + part;
  }
  return result;
}

void clip_gradients(const std::vector<at::Tensor>& grads, double total_norm, double max_norm) {
  const double coef = max_norm / (total_norm + 1e-6);
  if (coef >= 1) return;
  for (auto& [device, group] : by_device_and_dtype(grads)) at::_foreach_mul_(group, coef);
}

double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm, double norm_type) {
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  const double sum = gradient_power_sum(grads, norm_type);
  const double total = std::isinf(norm_type) ? sum : std::pow(sum, 1.0 / norm_type);
  clip_gradients(grads, total, max_norm);
  return total;
}

void clear_gradients(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) p.mutable_grad() = at::Tensor();
}

}  // namespace fsdpp::optim
