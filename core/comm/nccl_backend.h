// NcclBackend: CUDA tensors over NCCL, one GPU per local rank (CUDA builds only;
// nccl_group.h has the stream semantics and the engines: c10d's ProcessGroupNCCL, or
// fsdpp's own). The group's NCCL communicator connects at its first collective. A collective is issued on the caller's
// thread and is done on the host at once; CommWork::completed() asks the device, and wait() makes the caller's stream
// join it. Byte tallies follow the Gloo backend's transfer plan (chunk_plan.h), so the analytic volume checks hold on
// either transport. Internal to core/comm/.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/comm/backend.h"
#include "core/comm/group_state.h"
#include "core/comm/nccl_group.h"

namespace fsdpp::comm {

class NcclBackend final : public CollectiveBackend {
 public:
  explicit NcclBackend(GroupState& group) : group_(group) {}

  // CUDA tensors, when every local rank has a GPU of its own (nccl_usable).
  bool serves(const at::Tensor& t) const override;

  CommWork all_gather_into(at::Tensor output, at::Tensor input, const std::string& what) override;
  CommWork reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op, const std::string& what) override;
  CommWork all_reduce(at::Tensor tensor, ReduceOp op, const std::string& what) override;
  CommWork broadcast(at::Tensor tensor, int root, const std::string& what) override;
  CommWork all_to_all_single(at::Tensor output, at::Tensor input, const AllToAllRows& rows,
                             const std::string& what) override;

  // Destroys the NCCL communicator.
  void disconnect() override { nccl_.reset(); }

 private:
  using Issue = std::function<std::shared_ptr<NcclDone>(NcclCommunicator&, std::vector<at::Tensor>&)>;

  // The group's NCCL communicator on `device`, connected at the first call.
  NcclCommunicator& nccl_group(at::Device device);
  // Issues an NCCL collective on `outputs`' device: `issue` gets contiguous stand-ins of
  // `outputs` (copied back after the caller's stream joined). `sent`/`received`: this
  // rank's bytes by the Gloo backend's plan.
  CommWork call(CollectiveKind kind, const std::string& what, int64_t sent, int64_t received,
                std::vector<at::Tensor> outputs, const Issue& issue);

  GroupState& group_;
  std::unique_ptr<NcclCommunicator> nccl_;
};

}  // namespace fsdpp::comm
