// Small layers the Hugging Face model families share, with HF's parameter names.
#pragma once

#include <torch/torch.h>

namespace fsdpp::models {

// HF GPT-2's Conv1D: y = x W + b, W stored [in, out].
struct Conv1DImpl : torch::nn::Module {
  Conv1DImpl(int64_t in, int64_t out);
  torch::Tensor forward(const torch::Tensor& x);
  // forward's backward without its value (nn::gradient_only_linear), or undefined.
  torch::Tensor gradient_only_forward(const torch::Tensor& x);
  torch::Tensor weight, bias;
};
TORCH_MODULE(Conv1D);

// LM head y = x W^T with W [vocab, dim]. Tied: W is the token embedding's own tensor,
// registered here too so that anything walking the module tree sees the tie.
struct LmHeadImpl : torch::nn::Module {
  LmHeadImpl(int64_t dim, int64_t vocab);          // untied
  explicit LmHeadImpl(const torch::Tensor& tied);  // tied to an embedding weight
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;
};
TORCH_MODULE(LmHead);

// Llama's RMSNorm: x / sqrt(mean(x^2) + eps) * weight, computed in fp32. The eager formula
// is HF's LlamaRMSNorm op by op (normalised in fp32, rounded to x's dtype, then scaled).
// The fused kernel (PyTorch's at::_fused_rms_norm, what torch.nn.RMSNorm runs on CUDA)
// computes the same in one pass, rounding once at the end, and keeps only x and 1/rms for
// backward instead of every intermediate.
enum class RmsNormKernel { Fused, Eager };

// Which one RmsNorm runs where it can choose: on CUDA, in LibTorch builds that have the
// kernel, when x and the weight share a dtype; everywhere else it runs the eager formula.
// Process-wide (like torch.backends flags); default Fused. Thread-safe.
void set_rms_norm_kernel(RmsNormKernel kernel);
RmsNormKernel rms_norm_kernel();

// "fused" or "eager": what RmsNorm runs for x of this device and dtype with a weight of
// the same dtype, under the current setting.
const char* rms_norm_kernel_name(const at::Device& device);

// unit_offset: Gemma's RMSNorm (Gemma2RMSNorm, Gemma3RMSNorm), x / rms(x) * (1 + weight) with
// the weight applied in fp32 too and one rounding to x's dtype at the end; its weight starts
// at zero. It always runs the eager formula.
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t dim, double eps, bool unit_offset = false);
  torch::Tensor forward(const torch::Tensor& x);
  double eps;
  bool unit_offset;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

}  // namespace fsdpp::models
