// Small layers the Hugging Face model families share, with HF's parameter names.
#pragma once

#include <torch/torch.h>

namespace fsdpp::models {

// HF GPT-2's Conv1D: y = x W + b, W stored [in, out].
struct Conv1DImpl : torch::nn::Module {
  Conv1DImpl(int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};
TORCH_MODULE(Conv1D);

// LM head y = x W^T with W [vocab, dim]. Tied: W is the token embedding's own tensor,
// registered here too so that anything walking the module tree sees the tie.
struct LmHeadImpl : torch::nn::Module {
  LmHeadImpl(int64_t dim, int64_t vocab);           // untied
  explicit LmHeadImpl(const torch::Tensor& tied);   // tied to an embedding weight
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
};
TORCH_MODULE(LmHead);

// Llama's RMSNorm: x / sqrt(mean(x^2) + eps) * weight, computed in fp32 as HF does.
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

}  // namespace fsdpp::models
