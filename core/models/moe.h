// A sparse mixture-of-experts MLP, as Mixtral's MixtralSparseMoeBlock computes it: a
// bias-free router scores every expert for every token, softmax in fp32 over all experts,
// the top k kept (renormalised to sum to 1 when normalize_top_k), and each token's output is
// the weighted sum of its k experts' SwiGLU MLPs. Tensor names are the checkpoints': the
// router `gate.weight`, expert i's `experts.{i}.w1` (gate), `w3` (up) and `w2` (down).
// Experts are submodules of the block, so FSDP shards them with the decoder layer that
// holds it; an expert no token picks gets no gradient that step.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace fsdpp::models {

struct MoeOptions {
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // of one expert
  int64_t num_experts = 0;
  int64_t top_k = 2;
  bool normalize_top_k = true;  // Mixtral: always
};

struct ExpertMlpImpl : torch::nn::Module {
  ExpertMlpImpl(int64_t hidden, int64_t intermediate);
  torch::Tensor forward(const torch::Tensor& x);  // w2(silu(w1(x)) * w3(x))
  torch::nn::Linear w1{nullptr}, w2{nullptr}, w3{nullptr};
};
TORCH_MODULE(ExpertMlp);

struct SparseMoeImpl : torch::nn::Module {
  explicit SparseMoeImpl(const MoeOptions& options);
  // x [b, s, hidden] -> [b, s, hidden]. Experts run in ascending order on the tokens that
  // picked them and their weighted outputs are summed per token in that order (index_add_),
  // as transformers' MixtralExperts does, so fp32 results agree to round-off.
  torch::Tensor forward(const torch::Tensor& x);
  MoeOptions options;
  torch::nn::Linear gate{nullptr};
  torch::nn::ModuleList experts;
  std::vector<ExpertMlp> expert_list;
};
TORCH_MODULE(SparseMoe);

}  // namespace fsdpp::models
