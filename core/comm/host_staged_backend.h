// HostStagedBackend: CUDA tensors of ranks that share a GPU, where NCCL cannot run (it needs
// one GPU per rank). Each collective copies its inputs to the host at issue, runs on the
// Gloo backend there, and the caller's wait() copies the host result back into the device
// tensor. Same results, byte counts and errors as the Gloo backend's. Internal to core/comm/.
#pragma once

#include "core/comm/backend.h"
#include "core/comm/gloo_backend.h"

namespace fsdpp::comm {

class HostStagedBackend final : public CollectiveBackend {
 public:
  explicit HostStagedBackend(GlooBackend& host) : host_(host) {}

  // CUDA tensors (tried after the NCCL backend).
  bool serves(const at::Tensor& t) const override { return t.is_cuda(); }

  CommWork all_gather_into(at::Tensor output, at::Tensor input, const std::string& what) override;
  CommWork reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op, const std::string& what) override;
  CommWork all_reduce(at::Tensor tensor, ReduceOp op, const std::string& what) override;
  CommWork broadcast(at::Tensor tensor, int root, const std::string& what) override;
  CommWork all_to_all_single(at::Tensor output, at::Tensor input, const AllToAllRows& rows,
                             const std::string& what) override;

  // The Gloo backend's connections are its own to drop.
  void disconnect() override {}

 private:
  GlooBackend& host_;
};

}  // namespace fsdpp::comm
