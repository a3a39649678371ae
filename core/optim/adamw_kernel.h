// One AdamW step over fp32 arrays in host memory, fused: each element of the parameter,
// gradient and both moments is read and written once, where torch::optim::AdamW's
// per-tensor step makes ~9 passes over the bytes (the CPU step is memory-bound; the same
// idea as DeepSpeed's CPUAdam and PyTorch >= 2.4's fused CPU AdamW, which LibTorch 1.13
// does not have).
//
// The arithmetic is torch::optim::AdamW's, operation for operation and in its order, in
// fp32 with fp32 constants (as ATen evaluates a float tensor with a double scalar):
//   p = p * (1 - lr*wd)                      decoupled weight decay (exact no-op at wd=0)
//   m = m * b1 + (1-b1) * g
//   v = v * b2 + ((1-b2) * g) * g
//   p = p + (-lr/bc1 * m) / (sqrt(v) / sqrt(bc2) + eps)      bc_i = 1 - b_i^step
// with no fused multiply-add anywhere (this file compiles with -ffp-contract=off). So the
// vector and portable paths give the same bits, on any thread count and any x86-64 CPU.
// Against torch's step the result differs by round-off only: ATen's vectorised add uses
// FMA where this kernel rounds twice.
//
// Not thread-safe on overlapping ranges; disjoint ranges may run concurrently.
#pragma once

#include <cstdint>

namespace fsdpp::optim {

// The per-step scalars, rounded to fp32 once.
struct AdamWStepConstants {
  float decay;  // 1 - lr * weight_decay
  float beta1, one_minus_beta1;
  float beta2, one_minus_beta2;
  float sqrt_bias_correction2;
  float eps;
  float neg_step_size;  // -lr / bias_correction1
};

// `step` is the step being taken, counting from 1 (the state's step after increment).
AdamWStepConstants adamw_step_constants(double lr, double beta1, double beta2, double eps, double weight_decay,
                                        int64_t step);

// "avx2" when this CPU runs the 8-wide path, else "generic".
const char* adamw_kernel_isa();

// Steps elements [0, n) of p (with gradient g and moments m, v) in place. force_generic
// takes the portable path even where AVX2 exists (tests compare the two).
void adamw_step_range(float* p, const float* g, float* m, float* v, int64_t n, const AdamWStepConstants& c,
                      bool force_generic = false);

}  // namespace fsdpp::optim
