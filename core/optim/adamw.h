// AdamW over FSDP shards with two parameter groups, the convention of nanoGPT, llm.c and
// torchtitan's default: weight decay applies to every parameter with 2 or more
// dimensions (matmul weights and embeddings, including a tied LM head), never to
// biases or normalisation weights (1-D). A shard keeps its parameter's dimensionality,
// so the rule gives the same groups sharded and unsharded.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace fsdpp::optim {

struct AdamWSettings {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;  // PyTorch's defaults
  double eps = 1e-8;
  double weight_decay = 0.0;
  // FusedAdamW (fused_adamw.h): PyTorch's fused kernel for CUDA parameters in LibTorch
  // >= 2.0, fsdpp's fused kernel for host fp32 parameters, torch::optim::AdamW's own step
  // for anything else. false: torch::optim::AdamW.
  bool fused = true;
};

// A tensor listed under several names (a tied weight) is one parameter, stepped once
// (core/nn/unique_parameters.h).
std::unique_ptr<torch::optim::AdamW> make_adamw(const std::vector<std::pair<std::string, at::Tensor>>& named,
                                                const AdamWSettings& settings);

// Which kernels the optimizer's last step ran, for benchmark records: "fused" (PyTorch's
// CUDA kernel), "fused-cpu" (fsdpp's host kernel), "fused+fused-cpu", or "per-tensor"
// (torch::optim::AdamW's step).
const char* step_implementation(const torch::optim::AdamW& optimizer);

// The optimizer's parameters in its groups' order, each once (make_adamw lists a tied
// weight once; the model's named_parameters lists it under each name).
std::vector<at::Tensor> optimizer_parameters(const torch::optim::Optimizer& optimizer);

// Sets every group's learning rate.
void set_lr(torch::optim::Optimizer& optimizer, double lr);

// Whether the rule above decays this parameter.
bool decays(const at::Tensor& parameter);

}  // namespace fsdpp::optim
