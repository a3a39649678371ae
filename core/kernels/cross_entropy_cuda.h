// The fused cross-entropy for CUDA logits, in the CUDA plugin (core/runtime/cuda_plugin.h):
// cross_entropy.h's three calls, which forward CUDA logits here when the plugin is loaded.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>

namespace fsdpp::kernels::cuda {

const char* cross_entropy_kernel_name(at::Device device);
bool has_fused_cross_entropy(const at::Tensor& logits);
at::Tensor fused_summed_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index);

}  // namespace fsdpp::kernels::cuda
