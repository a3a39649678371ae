// AdamW whose step reads each parameter, gradient and moment once, where
// torch::optim::AdamW's per-tensor step runs ~9 kernels per parameter, each a full pass
// over its bytes (the update is memory-bound, so those passes are its cost). Two fused
// routes:
//   - CUDA parameters: at::_fused_adamw_, the kernel behind torch.optim.AdamW(fused=True)
//     and torchtitan's default optimizer (LibTorch >= 2.0; any floating dtype);
//   - host fp32 parameters: fsdpp's kernel (adamw_kernel.h), any LibTorch version, split
//     across the intra-op threads in fixed pieces.
// Each route needs dense, contiguous tensors (parameter, gradient, and moments of the
// parameter's dtype and device) and amsgrad off. If any parameter with a gradient fits
// neither route, the whole step is torch::optim::AdamW's own, bit for bit.
//
// State is torch::optim::AdamW's (AdamWParamState: step, exp_avg, exp_avg_sq, under the
// same keys), so save/load, fsdpp checkpoints and resume see no difference. The update is
// the same formula (decoupled weight decay p *= 1 - lr * wd, then Adam with bias
// correction); in fp32 it differs from the per-tensor step's by round-off, and is
// deterministic: the same inputs give the same bits, whatever the thread count.
#pragma once

#include <torch/torch.h>

namespace fsdpp::optim {

class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;

  torch::Tensor step(LossClosure closure = nullptr) override;

  // Which kernels the last step() ran: "fused" (CUDA), "fused-cpu" (host),
  // "fused+fused-cpu" (both), or "per-tensor" (torch's step; also before the first step).
  const char* last_step_kernels() const { return last_step_kernels_; }

 private:
  const char* last_step_kernels_ = "per-tensor";
};

// Whether this LibTorch has the CUDA fused kernel at all (2.0 and later).
bool fused_adamw_available();

}  // namespace fsdpp::optim
