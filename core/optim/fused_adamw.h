// AdamW whose step runs PyTorch's fused multi-tensor kernel where there is one:
// at::_fused_adamw_, the kernel behind torch.optim.AdamW(fused=True) and torchtitan's
// default optimizer. It reads each parameter, gradient and moment once per step, where
// torch::optim::AdamW's per-tensor step runs ~9 kernels per parameter, each a full pass
// over its bytes (the update is memory-bound: on an H100 that is ~40 ms of a 1.2B-
// parameter model's step against ~14 ms fused).
//
// The fused kernel runs for CUDA parameters of a floating dtype with dense, contiguous
// gradients and amsgrad off, in LibTorch >= 2.0. Anything else (CPU parameters, LibTorch
// 1.13, amsgrad, sparse or strided tensors) takes torch::optim::AdamW's own step, bit for
// bit: fsdpp's CPU training is unchanged.
//
// State is torch::optim::AdamW's (AdamWParamState: step, exp_avg, exp_avg_sq, under the
// same keys), so save/load, fsdpp checkpoints and resume see no difference. The update is
// the same formula (decoupled weight decay p *= 1 - lr * wd, then Adam with bias
// correction); its fp32 result differs from the per-tensor step's by round-off (the kernel
// evaluates it in another order), and is deterministic: the same inputs give the same bits.
#pragma once

#include <torch/torch.h>

namespace fsdpp::optim {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Whether the last step() ran the fused kernel (false before the first step).
  bool last_step_fused() const { return last_step_fused_; }

 private:
  bool last_step_fused_ = false;
};

// Whether this LibTorch has the fused kernel at all (2.0 and later).
bool fused_adamw_available();

}  // namespace fsdpp::optim
