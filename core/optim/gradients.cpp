#include "core/optim/gradients.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>

#include "core/runtime/threads.h"

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

// fp32 tensors in host memory that one pointer walks: what the host loops below take.
bool host_fp32(const std::vector<at::Tensor>& group) {
  return std::all_of(group.begin(), group.end(), [](const at::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.layout() == at::kStrided && t.is_contiguous();
  });
}

// 128 KiB of fp32 a piece; pieces are the unit of work on the intra-op threads, and each
// tensor's sum adds its pieces' in order, so the thread count cannot change a bit.
constexpr int64_t kReducePieceNumel = 32768;

struct ReducePiece {
  size_t tensor;
  int64_t begin, end;
};

std::vector<ReducePiece> pieces_of(const std::vector<at::Tensor>& group) {
  std::vector<ReducePiece> pieces;
  for (size_t i = 0; i < group.size(); ++i)
    for (int64_t begin = 0; begin < group[i].numel(); begin += kReducePieceNumel)
      pieces.push_back({i, begin, std::min(group[i].numel(), begin + kReducePieceNumel)});
  return pieces;
}

// Each tensor's 2-norm, rounded to fp32 as _foreach_norm returns it; the squares are summed
// in fp64, four running sums a piece (independent adds keep the loop at memory speed).
// _foreach_norm's CPU fallback reduces one tensor at a time at a fraction of the memory
// bandwidth, which dominates an offloaded step's clipping.
std::vector<float> host_l2_norms(const std::vector<at::Tensor>& group) {
  const auto pieces = pieces_of(group);
  std::vector<double> piece_sums(pieces.size());
  runtime::parallel_chunks(static_cast<int64_t>(pieces.size()), 16, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      const auto& piece = pieces[static_cast<size_t>(k)];
      const float* x = group[piece.tensor].data_ptr<float>();
      double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      int64_t i = piece.begin;
      for (; i + 4 <= piece.end; i += 4) {
        s0 += static_cast<double>(x[i]) * x[i];
        s1 += static_cast<double>(x[i + 1]) * x[i + 1];
        s2 += static_cast<double>(x[i + 2]) * x[i + 2];
        s3 += static_cast<double>(x[i + 3]) * x[i + 3];
      }
      for (; i < piece.end; ++i) s0 += static_cast<double>(x[i]) * x[i];
      piece_sums[static_cast<size_t>(k)] = (s0 + s1) + (s2 + s3);
    }
  });
  std::vector<double> sums(group.size(), 0.0);
  for (size_t k = 0; k < pieces.size(); ++k) sums[pieces[k].tensor] += piece_sums[k];
  std::vector<float> norms;
  norms.reserve(group.size());
  for (double sum : sums) norms.push_back(static_cast<float>(std::sqrt(sum)));
  return norms;
}

// x *= coef in fp32, as _foreach_mul_ with a Scalar computes it on fp32 CPU tensors.
void host_scale(const std::vector<at::Tensor>& group, double coef) {
  const auto pieces = pieces_of(group);
  const auto c = static_cast<float>(coef);
  runtime::parallel_chunks(static_cast<int64_t>(pieces.size()), 16, [&](int64_t first, int64_t last) {
    for (int64_t k = first; k < last; ++k) {
      const auto& piece = pieces[static_cast<size_t>(k)];
      float* x = group[piece.tensor].data_ptr<float>();
      for (int64_t i = piece.begin; i < piece.end; ++i) x[i] *= c;
    }
  });
}

}  // namespace

double host_value(const at::Tensor& scalar) { return scalar.item<double>(); }

namespace {

// A 0-dim tensor's value: from host memory when it is there (no device to wait for, no
// operator), else by host_value.
double value_on_host(const at::Tensor& scalar) {
  if (!scalar.device().is_cpu()) return host_value(scalar);
  return *scalar.to(at::kDouble).contiguous().data_ptr<double>();
}

}  // namespace

at::Tensor gradient_power_sum_on_device(const std::vector<at::Tensor>& grads, double norm_type) {
  if (!(norm_type > 0)) throw std::invalid_argument("gradient norm: norm_type must be > 0 or inf");
  const bool inf = std::isinf(norm_type);
  // Host groups first (the map orders the CPU first), summed as host doubles; then each
  // device group's part, added where the first one lives, so that no device value is read.
  double host_sum = 0;
  at::Tensor device_sum;
  for (const auto& [key, group] : by_device_and_dtype(grads)) {
    if (group.front().device().is_cpu()) {
      if (norm_type == 2 && host_fp32(group)) {
        for (float norm : host_l2_norms(group)) host_sum += static_cast<double>(norm) * norm;
        continue;
      }
      auto norms = at::stack(at::_foreach_norm(group, norm_type)).to(at::kDouble);
      const double part = value_on_host(inf ? norms.max() : norms.pow(norm_type).sum());
      host_sum = inf ? std::max(host_sum, part) : host_sum + part;
      continue;
    }
    auto norms = at::stack(at::_foreach_norm(group, norm_type)).to(at::kDouble);
    auto part = inf ? norms.max() : norms.pow(norm_type).sum();
    if (!device_sum.defined()) device_sum = at::scalar_tensor(host_sum, at::kDouble).to(part.device());
    part = part.to(device_sum.device());
    device_sum = inf ? at::maximum(device_sum, part) : device_sum + part;
  }
  return device_sum.defined() ? device_sum : at::scalar_tensor(host_sum, at::kDouble);
}

double gradient_power_sum(const std::vector<at::Tensor>& grads, double norm_type) {
  return host_value(gradient_power_sum_on_device(grads, norm_type));
}

at::Tensor norm_from_power_sum(const at::Tensor& power_sum, double norm_type) {
  if (std::isinf(norm_type)) return power_sum;
  // On the host by std::pow, the value the double-valued calls always gave; a device's pow
  // stays on the device.
  if (power_sum.device().is_cpu())
    return at::scalar_tensor(std::pow(value_on_host(power_sum), 1.0 / norm_type), at::kDouble);
  return power_sum.pow(1.0 / norm_type);
}

void clip_gradients(const std::vector<at::Tensor>& grads, const at::Tensor& total_norm, double max_norm) {
  const auto groups = by_device_and_dtype(grads);
  std::optional<double> host_coef;  // read once, where some group is on the host
  at::Tensor device_coef;           // min(coef, 1), on total_norm's device
  for (const auto& [key, group] : groups) {
    if (group.front().device().is_cpu()) {
      if (!host_coef) host_coef = max_norm / (value_on_host(total_norm) + 1e-6);
      if (*host_coef >= 1) continue;
      if (host_fp32(group)) {
        host_scale(group, *host_coef);
      } else {
        at::_foreach_mul_(group, *host_coef);
      }
      continue;
    }
    // clip_grad_norm_'s device rule: always multiply by the clamped coefficient (x * 1 is x,
    // bit for bit), so that nothing is read; in the dtype _foreach_mul_ computes in (opmath).
    if (!device_coef.defined())  // a division, as the host's (Scalar / Tensor would multiply by a reciprocal)
      device_coef = at::full({}, max_norm, total_norm.options()).div(total_norm + 1e-6).clamp_max(1.0);
    const auto opmath = group.front().scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
    at::_foreach_mul_(group, device_coef.to(group.front().device(), opmath));
  }
}

void clip_gradients(const std::vector<at::Tensor>& grads, double total_norm, double max_norm) {
  clip_gradients(grads, at::scalar_tensor(total_norm, at::kDouble), max_norm);
}

namespace {

std::vector<at::Tensor> defined_gradients(const std::vector<at::Tensor>& parameters) {
  std::vector<at::Tensor> grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad());
  return grads;
}

}  // namespace

at::Tensor grad_norm_on_device(const std::vector<at::Tensor>& parameters, double norm_type) {
  return norm_from_power_sum(gradient_power_sum_on_device(defined_gradients(parameters), norm_type), norm_type);
}

at::Tensor clip_grad_norm_on_device(const std::vector<at::Tensor>& parameters, double max_norm, double norm_type) {
  auto total = grad_norm_on_device(parameters, norm_type);
  clip_gradients(defined_gradients(parameters), total, max_norm);
  return total;
}

double clip_grad_norm(const std::vector<at::Tensor>& parameters, double max_norm, double norm_type) {
  return host_value(clip_grad_norm_on_device(parameters, max_norm, norm_type));
}

void clear_gradients(torch::optim::Optimizer& optimizer) {
  for (auto& group : optimizer.param_groups())
    for (auto& p : group.params()) p.mutable_grad() = at::Tensor();
}

}  // namespace fsdpp::optim
