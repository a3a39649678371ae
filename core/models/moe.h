// A sparse mixture-of-experts MLP, as Mixtral's MixtralSparseMoeBlock and Qwen3-MoE's
// Qwen3MoeSparseMoeBlock compute it: a bias-free router scores every expert for every token,
// softmax in fp32 over all experts, the top k kept (renormalised to sum to 1 when
// normalize_top_k), and each token's output is the weighted sum of its k experts' SwiGLU
// MLPs. Tensor names are the checkpoints': the router `gate.weight`, expert i's gate, up and
// down projections `experts.{i}.w1`, `w3`, `w2` (Mixtral) or `experts.{i}.gate_proj`,
// `up_proj`, `down_proj` (Qwen3-MoE). Experts are submodules of the block, so FSDP shards
// them with the decoder layer that holds it; an expert no token picks gets no gradient that
// step.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <vector>

namespace fsdpp::models {

struct MoeOptions {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // of one expert
  int64_t num_experts = 0;
  int64_t top_k = 2;
  bool normalize_top_k = true;  // Mixtral: always; Qwen3-MoE: norm_topk_prob
  // Qwen3-MoE's router hands its top-k weights back in the router logits' dtype (Mixtral's
  // stay fp32): in bf16 the experts' outputs are weighted by bf16 weights.
  bool weights_in_input_dtype = false;
  bool qwen_names = false;  // experts' tensors named gate_proj/up_proj/down_proj, not w1/w3/w2
};

struct ExpertMlpImpl : torch::nn::Module {
  ExpertMlpImpl(int64_t hidden, int64_t intermediate, bool qwen_names);
  torch::Tensor forward(const torch::Tensor& x);  // down(silu(gate(x)) * up(x))
  torch::nn::Linear gate{nullptr}, down{nullptr}, up{nullptr};
};
TORCH_MODULE(ExpertMlp);

// The router logits of every MoE layer of one forward pass, in layer order, for the
// load-balancing loss (load_balancing_loss below).
using RouterLogits = std::vector<torch::Tensor>;

struct SparseMoeImpl : torch::nn::Module {
  // `record`: when not null, every forward appends its router logits [tokens, experts] there.
  SparseMoeImpl(const MoeOptions& options, std::shared_ptr<RouterLogits> record = nullptr);
  // x [b, s, hidden] -> [b, s, hidden]. Experts run in ascending order on the tokens that
  // picked them and their weighted outputs are summed per token in that order (index_add_),
  // as transformers' MixtralExperts does, so fp32 results agree to round-off.
  torch::Tensor forward(const torch::Tensor& x);
  MoeOptions options;
  torch::nn::Linear gate{nullptr};
  torch::nn::ModuleList experts;
  std::vector<ExpertMlp> expert_list;
  std::shared_ptr<RouterLogits> record;
};
TORCH_MODULE(SparseMoe);

// Switch Transformer's load-balancing loss over the router logits of every layer, as
// transformers' load_balancing_loss_func computes it without an attention mask: with f_e the
// fraction of (token, slot) picks that went to expert e and P_e the mean router probability
// of e, both over every layer's tokens, num_experts * sum_e f_e * P_e. The softmax is in the
// logits' dtype, the sums in fp32; the gradient flows through P only. A scalar fp32 tensor.
torch::Tensor load_balancing_loss(const RouterLogits& router_logits, int64_t num_experts, int64_t top_k);

}  // namespace fsdpp::models
