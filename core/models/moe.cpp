#include "core/models/moe.h"

#include <stdexcept>
#include <utility>

#include "core/nn/checkpoint.h"
#include "core/nn/module_hooks.h"

namespace fsdpp::models {

ExpertMlpImpl::ExpertMlpImpl(int64_t hidden, int64_t intermediate, bool qwen_names) {
  auto linear = [&](const char* name, int64_t in, int64_t out) {
    return register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(false)));
  };
  // Registered in the order each checkpoint lists them.
  if (qwen_names) {
    gate = linear("gate_proj", hidden, intermediate);
    up = linear("up_proj", hidden, intermediate);
    down = linear("down_proj", intermediate, hidden);
  } else {
    gate = linear("w1", hidden, intermediate);
    down = linear("w2", intermediate, hidden);
    up = linear("w3", hidden, intermediate);
  }
}

torch::Tensor ExpertMlpImpl::forward(const torch::Tensor& x) {
  return nn::call(down, torch::silu(nn::call(gate, x)) * nn::call(up, x));
}

SparseMoeImpl::SparseMoeImpl(const MoeOptions& o, std::shared_ptr<RouterLogits> record)
    : options(o), record(std::move(record)) {
  gate = register_module("gate", torch::nn::Linear(torch::nn::LinearOptions(o.hidden_size, o.num_experts).bias(false)));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t i = 0; i < o.num_experts; ++i) {
    expert_list.emplace_back(o.hidden_size, o.intermediate_size, o.qwen_names);
    experts->push_back(expert_list.back());
  }
}

torch::Tensor SparseMoeImpl::forward(const torch::Tensor& x) {
  const auto tokens = x.reshape({-1, x.size(-1)});
  // The TopKRouter: logits in x's dtype, probabilities in fp32, the k largest.
  const auto logits = nn::call(gate, tokens);
  // Recorded for the loss when training: not under no_grad (evaluation, generation). Under
  // activation checkpointing, side_output gives the recorded logits their gradient path.
  if (record && (torch::GradMode::is_enabled() || nn::in_checkpointed_forward()))
    nn::side_output(logits, [record = record](at::Tensor t) { record->push_back(std::move(t)); });
  const auto probs = torch::softmax(logits.to(torch::kFloat), -1);
  auto [weights, chosen] = torch::topk(probs, options.top_k, -1);
  if (options.normalize_top_k) weights = weights / weights.sum(-1, /*keepdim=*/true);
  if (options.weights_in_input_dtype) weights = weights.to(logits.scalar_type());
  auto out = torch::zeros_like(tokens);
  for (int64_t e = 0; e < options.num_experts; ++e) {
    // (token, slot) pairs that chose expert e, ordered by slot then token (torch.where over
    // the experts' [expert, slot, token] mask).
    const auto picked = (chosen == e).t().nonzero();  // [n, 2]: slot, token
    if (picked.size(0) == 0) continue;
    const auto slot = picked.select(1, 0), token = picked.select(1, 1);
    auto y = nn::call(expert_list[static_cast<size_t>(e)], tokens.index_select(0, token));
    y = y * weights.index({token, slot}).unsqueeze(-1);
    out.index_add_(0, token, y.to(out.scalar_type()));
  }
  return out.view(x.sizes());
}

torch::Tensor load_balancing_loss(const RouterLogits& router_logits, int64_t num_experts, int64_t top_k) {
  if (router_logits.empty()) throw std::logic_error("load_balancing_loss: no router logits were recorded");
  const auto options = router_logits.front().options().dtype(torch::kFloat);
  auto picks = torch::zeros({num_experts}, options);
  auto probability_sum = torch::zeros({num_experts}, options);
  double rows = 0;
  for (const auto& logits : router_logits) {
    const auto probs = torch::softmax(logits, -1);
    const auto chosen = std::get<1>(torch::topk(probs, top_k, -1));
    {
      torch::NoGradGuard no_grad;  // counts carry no gradient (histc in transformers)
      picks = picks + torch::one_hot(chosen.reshape({-1}), num_experts).sum(0).to(torch::kFloat);
    }
    probability_sum = probability_sum + probs.to(torch::kFloat).sum(0);
    rows += static_cast<double>(logits.size(0));
  }
  return (picks / rows * (probability_sum / rows)).sum() * static_cast<double>(num_experts);
}

}  // namespace fsdpp::models
