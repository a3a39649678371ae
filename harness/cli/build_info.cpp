#include "harness/cli/build_info.h"

#include <torch/version.h>

#include <string>

#include "fsdpp_commit.h"  // generated at every build by harness/cli/write_commit.cmake

#if defined(FSDPP_WITH_CUDA)
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

#ifndef FSDPP_VERSION
#define FSDPP_VERSION "unknown"
#endif

namespace fsdpp::cli {

std::string build_info() {
  std::string out = std::string("fsdpp ") + FSDPP_VERSION + " (commit " + FSDPP_GIT_COMMIT + ")\n";
  out += std::string("LibTorch ") + TORCH_VERSION + "\n";
#if defined(FSDPP_WITH_CUDA)
  // CUDART_VERSION is major * 1000 + minor * 10.
  out += "CUDA " + std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10) + "\n";
  out += "NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." + std::to_string(NCCL_PATCH);
#else
  out += "CUDA not built (CPU-only LibTorch)\nNCCL not built";
#endif
  return out;
}

}  // namespace fsdpp::cli
