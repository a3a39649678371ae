// NcclCommunicator over c10d's ProcessGroupNCCL (nccl_group.h): the NCCL engine PyTorch's
// own FSDP2 runs on, with its semantics rather than fsdpp's copy of them:
// - a collective waits for the caller's current stream and runs on the process group's
//   own NCCL stream (high priority, as NcclGroup's);
// - the tensors it touches are recorded on that stream in the caching allocator, so the
//   caller may drop them at once;
// - Work::wait() makes the caller's current stream wait for it; the host does not block
//   (blockingWait off, PyTorch's default);
// - its watchdog aborts the communicator when a collective outlives the group's timeout
//   (TORCH_NCCL_ASYNC_ERROR_HANDLING decides what the process does then; PyTorch's default
//   tears it down, so peers see a dead rank through fsdpp's failure board and launcher).
// The process group creates its NCCL communicator at the first collective on `device`.
#include <c10/cuda/CUDAGuard.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include <string>
#include <utility>
#include <vector>

#include "core/comm/communicator.h"
#include "core/comm/nccl_group.h"

namespace fsdpp::comm {

namespace {

c10d::ReduceOp c10d_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return c10d::ReduceOp(c10d::ReduceOp::SUM);
    case ReduceOp::Avg: return c10d::ReduceOp(c10d::ReduceOp::AVG);
    case ReduceOp::Max: return c10d::ReduceOp(c10d::ReduceOp::MAX);
  }
  return c10d::ReduceOp(c10d::ReduceOp::SUM);
}

// One issued collective: joining is c10d's Work::wait() (the current stream waits).
class WorkDone final : public NcclDone {
 public:
  explicit WorkDone(c10::intrusive_ptr<c10d::Work> work) : work_(std::move(work)) {}
  void join() override { work_->wait(); }
  bool query() const override { return work_->isCompleted(); }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
};

class ProcessGroupNccl final : public NcclCommunicator {
 public:
  ProcessGroupNccl(c10::intrusive_ptr<c10d::ProcessGroupNCCL> group, at::Device device, std::string label)
      : group_(std::move(group)), device_(device), label_(std::move(label)) {}

  ~ProcessGroupNccl() override {
    try {
      group_->shutdown();              // destroys the NCCL communicators after their work, as destroy_process_group
    } catch (const std::exception&) {  // a broken group: nothing left to wait for
    }
  }

  at::Device device() const override { return device_; }

  std::shared_ptr<NcclDone> all_gather(const at::Tensor& output, const at::Tensor& input) override {
    return issue("all_gather", [&] {
      at::Tensor out = output, in = input;
      return group_->_allgather_base(out, in);
    });
  }

  std::shared_ptr<NcclDone> reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    return issue("reduce_scatter", [&] {
      at::Tensor out = output, in = input;
      c10d::ReduceScatterOptions options;
      options.reduceOp = c10d_op(op);
      return group_->_reduce_scatter_base(out, in, options);
    });
  }

  std::shared_ptr<NcclDone> all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    return issue("all_reduce", [&] {
      std::vector<at::Tensor> tensors{tensor};
      c10d::AllreduceOptions options;
      options.reduceOp = c10d_op(op);
      return group_->allreduce(tensors, options);
    });
  }

  std::shared_ptr<NcclDone> broadcast(const at::Tensor& tensor, int root) override {
    return issue("broadcast", [&] {
      std::vector<at::Tensor> tensors{tensor};
      c10d::BroadcastOptions options;
      options.rootRank = root;
      return group_->broadcast(tensors, options);
    });
  }

  // c10d's split sizes count dim-0 slices; fsdpp's rows are row_numel elements each, so
  // both tensors are viewed as [rows, row_numel].
  std::shared_ptr<NcclDone> all_to_all(const at::Tensor& output, const at::Tensor& input,
                                       const std::vector<int64_t>& output_rows, const std::vector<int64_t>& input_rows,
                                       int64_t row_numel) override {
    return issue("all_to_all", [&] {
      at::Tensor out = output.view({-1, row_numel}), in = input.view({-1, row_numel});
      std::vector<int64_t> out_splits = output_rows, in_splits = input_rows;
      return group_->alltoall_base(out, in, out_splits, in_splits);
    });
  }

 private:
  template <typename Call>
  std::shared_ptr<NcclDone> issue(const char* what, Call call) {
    c10::cuda::CUDAGuard guard(device_);
    try {
      return std::make_shared<WorkDone>(call());
    } catch (const std::exception& e) {
      throw CommError(std::string("fsdpp comm (ProcessGroupNCCL): ") + what + " " + label_ + ": " + e.what());
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group_;
  at::Device device_;
  std::string label_;
};

}  // namespace

std::unique_ptr<NcclCommunicator> connect_process_group_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                                             const std::string& key, int rank, int size,
                                                             at::Device device, std::chrono::milliseconds timeout,
                                                             std::string label) {
  auto options = c10d::ProcessGroupNCCL::Options::create(/*is_high_priority_stream=*/true);
  options->timeout = timeout;
  c10::intrusive_ptr<c10d::ProcessGroupNCCL> group;
  try {
    c10::cuda::CUDAGuard guard(device);
    group = c10::make_intrusive<c10d::ProcessGroupNCCL>(c10::make_intrusive<c10d::PrefixStore>(key, store), rank, size,
                                                        options);
  } catch (const std::exception& e) {
    throw CommError("fsdpp comm (ProcessGroupNCCL): cannot create the process group " + label + ": " + e.what());
  }
  return std::make_unique<ProcessGroupNccl>(std::move(group), device, std::move(label));
}

}  // namespace fsdpp::comm
