// The device backends: with the CUDA plugin loaded (core/runtime/cuda_plugin.h), NCCL first,
// then host staging for ranks that share a GPU; without it none, so CUDA tensors are refused.
#include <memory>
#include <vector>

#include "core/comm/backend.h"
#include "core/comm/host_staged_backend.h"
#include "core/runtime/cuda_plugin.h"

namespace fsdpp::comm {

std::vector<std::unique_ptr<CollectiveBackend>> make_device_backends(GroupState& group, GlooBackend& gloo) {
  std::vector<std::unique_ptr<CollectiveBackend>> backends;
  const runtime::CudaPlugin* plugin = runtime::cuda_plugin();
  if (plugin == nullptr) return backends;
  backends.push_back(plugin->make_nccl_backend(group));
  backends.push_back(std::make_unique<HostStagedBackend>(gloo));
  return backends;
}

bool device_backends_linked() { return runtime::cuda_plugin() != nullptr; }

}  // namespace fsdpp::comm
