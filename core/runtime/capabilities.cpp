#include "core/runtime/capabilities.h"

#include <torch/torch.h>

namespace fsdpp::runtime {

bool cpu_has_fp16_kernels() {
  static const bool available = [] {
    try {
      auto x = torch::ones({2, 2}, torch::kHalf);
      torch::layer_norm(torch::mm(x, x), {2});
      return true;
    } catch (const c10::Error&) {
      return false;
    }
  }();
  return available;
}

}  // namespace fsdpp::runtime
