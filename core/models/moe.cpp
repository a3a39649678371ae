#include "core/models/moe.h"

#include "core/nn/module_hooks.h"

namespace fsdpp::models {

ExpertMlpImpl::ExpertMlpImpl(int64_t hidden, int64_t intermediate) {
  auto linear = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
  };
  w1 = linear("w1", hidden, intermediate);
  w2 = linear("w2", intermediate, hidden);
  w3 = linear("w3", hidden, intermediate);
}

torch::Tensor ExpertMlpImpl::forward(const torch::Tensor& x) {
  return nn::call(w2, torch::silu(nn::call(w1, x)) * nn::call(w3, x));
}

SparseMoeImpl::SparseMoeImpl(const MoeOptions& o) : options(o) {
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(o.hidden_size, o.num_experts).bias(false)));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.num_experts; ++i) {
    expert_list.emplace_back(o.hidden_size, o.intermediate_size);
    experts->push_back(expert_list.back());
  }
}

torch::Tensor SparseMoeImpl::forward(const torch::Tensor& x) {
  const auto tokens = x.reshape({-1, x.size(-1)});
  // MixtralTopKRouter: logits in x's dtype, probabilities in fp32, the k largest.
  const auto probs = torch::softmax(nn::call(gate, tokens).to(torch::kFloat), -1);
  auto [weights, chosen] = torch::topk(probs, options.top_k, -1);
  if (options.normalize_top_k) weights = weights / weights.sum(-1, /*keepdim=*/true);
  auto out = torch::zeros_like(tokens);
  for (int64_t e = 0; e < options.num_experts; ++e) {
    // (token, slot) pairs that chose expert e, ordered by slot then token (torch.where over
    // MixtralExperts' [expert, slot, token] mask).
    const auto picked = (chosen == e).t().nonzero();  // [n, 2]: slot, token
    if (picked.size(0) == 0) continue;
    const auto slot = picked.select(1, 0), token = picked.select(1, 1);
    auto y = nn::call(expert_list[static_cast<size_t>(e)], tokens.index_select(0, token));
    y = y * weights.index({token, slot}).unsqueeze(-1);
    out.index_add_(0, token, y.to(out.scalar_type()));
  }
  return out.view(x.sizes());
}

}  // namespace fsdpp::models
