// The device backends of a build without CUDA: none. Linked in place of nccl_backend.cpp
// (core/CMakeLists.txt), so that the communicator refuses CUDA tensors without an #if.
#include "core/comm/backend.h"

namespace fsdpp::comm {

std::vector<std::unique_ptr<CollectiveBackend>> make_device_backends(GroupState& /*group*/, GlooBackend& /*gloo*/) {
  return {};
}

bool device_backends_linked() { return false; }

}  // namespace fsdpp::comm
