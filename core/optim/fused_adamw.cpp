#include "core/optim/fused_adamw.h"

#include <map>
#include <tuple>
#include <vector>

#include "core/compat/torch_compat.h"

namespace fsdpp::optim {

namespace {

#if FSDPP_HAS_FUSED_ADAMW
bool fusable(const at::Tensor& p) {
  const auto& g = p.grad();
  return p.is_cuda() && at::isFloatingType(p.scalar_type()) && p.layout() == at::kStrided && p.is_contiguous() &&
         g.layout() == at::kStrided && g.is_contiguous() && g.device() == p.device() &&
         g.scalar_type() == p.scalar_type();
}

// The tensors of one _fused_adamw_ call: one device, dtype and step count (the kernel reads
// the step from a tensor; a list may repeat one).
struct Bucket {
  std::vector<at::Tensor> params, grads, exp_avgs, exp_avg_sqs;
};
#endif

}  // namespace

bool fused_adamw_available() { return FSDPP_HAS_FUSED_ADAMW; }

torch::Tensor FusedAdamW::step(LossClosure closure) {
#if FSDPP_HAS_FUSED_ADAMW
  bool all_fusable = true;
  for (const auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    for (const auto& p : group.params())
      if (p.grad().defined() && (o.amsgrad() || !fusable(p))) all_fusable = false;
  }
  last_step_fused_ = all_fusable;
  if (!all_fusable) return torch::optim::AdamW::step(std::move(closure));

  torch::NoGradGuard no_grad;
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& o = static_cast<const torch::optim::AdamWOptions&>(group.options());
    std::map<std::tuple<at::Device::Type, int, at::ScalarType, int64_t>, Bucket> buckets;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      // The state the per-tensor step would create, under its key.
      auto& slot = state_[compat::optimizer_state_key(state_, p)];
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, at::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, at::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
      state.step(state.step() + 1);
      auto& b = buckets[{p.device().type(), p.device().index(), p.scalar_type(), state.step()}];
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.exp_avgs.push_back(state.exp_avg());
      b.exp_avg_sqs.push_back(state.exp_avg_sq());
    }
    const auto [beta1, beta2] = o.betas();
    for (auto& [key, b] : buckets) {
      const auto& p0 = b.params.front();
      auto step = at::full({}, static_cast<double>(std::get<3>(key)), p0.options().dtype(at::kFloat));
      std::vector<at::Tensor> steps(b.params.size(), step);
      at::_fused_adamw_(b.params, b.grads, b.exp_avgs, b.exp_avg_sqs, /*max_exp_avg_sqs=*/{}, steps, o.lr(), beta1,
                        beta2, o.weight_decay(), o.eps(), /*amsgrad=*/false, /*maximize=*/false);
    }
  }
  return loss;
#else
  last_step_fused_ = false;
  return torch::optim::AdamW::step(std::move(closure));
#endif
}

}  // namespace fsdpp::optim
