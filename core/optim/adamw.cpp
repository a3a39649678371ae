#include "core/optim/adamw.h"

#include "core/nn/unique_parameters.h"
#include "core/optim/fused_adamw.h"

namespace fsdpp::optim {

bool decays(const at::Tensor& parameter) { return parameter.dim() >= 2; }

std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                                const AdamWSettings& s) {
  // A tied weight appears under each of its names; torch::optim::AdamW would step it once
  // per appearance.
  std::vector<at::Tensor> decay, no_decay;
  for (const auto& p : nn::unique_parameters(named)) (decays(p.tensor) ? decay : no_decay).push_back(p.tensor);
  auto options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(s.lr).betas({s.beta1, s.beta2}).eps(s.eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty()) groups.emplace_back(decay, options(s.weight_decay));
  if (!no_decay.empty()) groups.emplace_back(no_decay, options(0.0));
  auto defaults = torch::optim::AdamWOptions(s.lr).betas({s.beta1, s.beta2}).eps(s.eps).weight_decay(s.weight_decay);
  if (s.fused) return std::make_unique<FusedAdamW>(groups, defaults);
  return std::make_unique<torch::optim::AdamW>(groups, defaults);
}

const char* step_implementation(const torch::optim::AdamW& optimizer) {
  const auto* fused = dynamic_cast<const FusedAdamW*>(&optimizer);
  return fused != nullptr ? fused->last_step_kernels() : "per-tensor";
}

std::vector<at::Tensor> optimizer_parameters(const torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> out;
  for (const auto& group : optimizer.param_groups())
    out.insert(out.end(), group.params().begin(), group.params().end());
  return out;
}

void set_lr(torch::optim::Optimizer& optimizer, double lr) {
  for (auto& group : optimizer.param_groups()) static_cast<torch::optim::AdamWOptions&>(group.options()).lr(lr);
}

}  // namespace fsdpp::optim
