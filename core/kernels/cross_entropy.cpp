// The fused kernel lives in the CUDA plugin (core/runtime/cuda_plugin.h); without it, callers
// take the composite.
#include "core/kernels/cross_entropy.h"

#include <stdexcept>
#include <string>

#include "core/runtime/cuda_plugin.h"

namespace fsdpp::kernels {

const char* cross_entropy_kernel_name(at::Device device) {
  const runtime::CudaPlugin* plugin = runtime::cuda_plugin();
  return plugin != nullptr ? plugin->cross_entropy_kernel_name(device) : "composite";
}

bool has_fused_cross_entropy(const at::Tensor& logits) {
  const runtime::CudaPlugin* plugin = runtime::cuda_plugin();
  return plugin != nullptr && plugin->has_fused_cross_entropy(logits);
}

at::Tensor fused_summed_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index) {
  const runtime::CudaPlugin* plugin = runtime::cuda_plugin();
  if (plugin == nullptr)
    throw std::invalid_argument("fused_summed_cross_entropy: no CUDA plugin (" + runtime::cuda_plugin_status() + ")");
  return plugin->fused_summed_cross_entropy(logits, targets, ignore_index);
}

}  // namespace fsdpp::kernels
