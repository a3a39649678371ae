// CollectiveBackend: one transport for a Communicator's collectives. Internal to core/comm/.
//
// communicator.cpp checks a collective's arguments, then hands it to the first of the
// group's backends that serves its tensors, in this order:
// - gloo_backend.{h,cpp}: CPU tensors; every collective is built on Gloo's byte
//   all-to-all and runs on the group's communication thread;
// - nccl_backend.{h,cpp}: CUDA tensors, one GPU per local rank (in the CUDA plugin);
// - host_staged_backend.{h,cpp}: CUDA tensors of ranks sharing a GPU: the Gloo backend
//   runs on host copies, and wait() copies the result back to the device (with the CUDA
//   plugin).
// Which backends a process has is decided once, by whether the CUDA plugin is loaded
// (make_device_backends), not by an #if inside a collective.
// A backend gets tensors that passed every check, and `what`, the op's label ("all_reduce
// [sum](1024 x Float)") for its errors. Layouts and semantics are those of Communicator's
// calls of the same names (communicator.h); group_state.h is what the backends share.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/communicator.h"

namespace fsdpp::comm {

class GlooBackend;
struct GroupState;

// all_to_all_single's resolved splits: rows (dim 0) per peer, and elements per row.
struct AllToAllRows {
  std::vector<int64_t> output_splits;  // rows received from rank j
  std::vector<int64_t> input_splits;   // rows sent to rank j
  int64_t output_row_numel = 0;
  int64_t input_row_numel = 0;
};

class CollectiveBackend {
 public:
  virtual ~CollectiveBackend() = default;

  // Whether this backend moves `t` (its device; for NCCL, also whether this machine gives
  // every local rank a GPU of its own).
  virtual bool serves(const at::Tensor& t) const = 0;

  virtual CommWork all_gather_into(at::Tensor output, at::Tensor input, const std::string& what) = 0;
  virtual CommWork reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op, const std::string& what) = 0;
  virtual CommWork all_reduce(at::Tensor tensor, ReduceOp op, const std::string& what) = 0;
  virtual CommWork broadcast(at::Tensor tensor, int root, const std::string& what) = 0;
  virtual CommWork all_to_all_single(at::Tensor output, at::Tensor input, const AllToAllRows& rows,
                                     const std::string& what) = 0;

  // Drops the connections this backend holds (shutdown(), after the teardown handshake).
  virtual void disconnect() = 0;
};

// The backends for device (CUDA) tensors, in the order they are tried: NCCL, then host
// staging through `gloo`, when the CUDA plugin is loaded (core/runtime/cuda_plugin.h, which
// holds nccl_backend.cpp); none without it, so CUDA tensors are refused.
std::vector<std::unique_ptr<CollectiveBackend>> make_device_backends(GroupState& group, GlooBackend& gloo);

// Whether this process has device backends (the same answer make_device_backends gives,
// without making any): how a refused tensor's error is worded.
bool device_backends_linked();

}  // namespace fsdpp::comm
