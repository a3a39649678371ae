// The one place where LibTorch 1.13 (Debian, CPU) and LibTorch 2.x (CUDA wheels) differ
// for fsdpp. Everything else includes this header instead of testing versions itself.
#pragma once

#include <torch/version.h>

#define FSDPP_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#if FSDPP_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

// scaled_dot_product_attention became public in 2.0 (flash / memory-efficient kernels on
// CUDA); 1.13 has only a private variant, so callers use exact math there.
#define FSDPP_HAS_SDPA FSDPP_TORCH_AT_LEAST(2, 0)

// at::_fused_adamw_ (torch.optim.AdamW(fused=True)'s kernel, CUDA) arrived in 2.0.
#define FSDPP_HAS_FUSED_ADAMW FSDPP_TORCH_AT_LEAST(2, 0)

namespace fsdpp::compat {

// The object that runs collectives. 2.x split ProcessGroup into a dispatching
// ProcessGroup and per-device Backends (ProcessGroupGloo/NCCL derive from Backend);
// 1.13's ProcessGroupGloo derives from ProcessGroup. Both expose the same virtuals we
// call: alltoall_base, allreduce, _allgather_base (NCCL), barrier.
#if FSDPP_TORCH_AT_LEAST(2, 0)
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// Handle of an in-flight c10d collective: c10d::Work in both (1.13 already moved it
// out of ProcessGroup into Work.hpp).
using C10dWork = c10d::Work;

inline const char* torch_version_string() { return TORCH_VERSION; }

}  // namespace fsdpp::compat
