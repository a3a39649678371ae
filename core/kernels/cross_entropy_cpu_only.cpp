// CPU-only builds: no fused cross-entropy kernel; callers take the composite.
#include <stdexcept>

#include "core/kernels/cross_entropy.h"

namespace fsdpp::kernels {

const char* cross_entropy_kernel_name(at::Device) { return "composite"; }

bool has_fused_cross_entropy(const at::Tensor&) { return false; }

at::Tensor fused_summed_cross_entropy(const at::Tensor&, const at::Tensor&, int64_t) {
  throw std::invalid_argument("fused_summed_cross_entropy: this build has no CUDA (a CPU-only LibTorch)");
}

}  // namespace fsdpp::kernels
