// NCCL for CUDA tensors (in the CUDA plugin). NcclCommunicator is what the NCCL backend
// (nccl_backend.h) calls; connect_nccl picks its engine, FSDPP_NCCL_ENGINE:
// - "c10d" (the default): c10d's ProcessGroupNCCL (nccl_process_group.cpp), the engine
//   PyTorch's users run at scale, with its streams, recordStream, timeouts and watchdog;
// - "fsdpp": NcclGroup below, fsdpp's own, over a raw ncclComm_t.
// NcclGroup: one ncclComm_t per group, bound to one GPU, with a dedicated stream. The stream semantics are c10d
// ProcessGroupNCCL's, which FSDP2 relies on for overlap:
// - a collective starts after everything already queued on the caller's current stream
//   (the NCCL stream waits for an event recorded there);
// - every tensor it touches is marked as used by the NCCL stream in the caching allocator
//   (recordStream), so the caller may drop its references at once: the memory is not
//   handed to another kernel before the collective is done;
// - NcclDone::join() makes the caller's current stream wait for the collective; the host
//   never blocks for it.
// A watchdog aborts the NCCL communicator when a collective is not done `timeout` after it
// was issued (a peer died or diverged), which releases kernels stuck in it; from then on
// every call throws CommError naming the stuck collective.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace c10d {
class Store;
}

namespace fsdpp::comm {

enum class ReduceOp;

// Completion of one queued collective.
class NcclDone {
 public:
  virtual ~NcclDone() = default;
  virtual void join() = 0;         // the caller's current stream waits for it
  virtual bool query() const = 0;  // finished on the device
};

// One group's NCCL collectives on one GPU. Layouts are Communicator's calls of the same
// names; tensors are contiguous CUDA tensors on device(). Each call returns at once; the
// NcclDone joins the caller's stream. Errors: CommError naming the collective.
class NcclCommunicator {
 public:
  virtual ~NcclCommunicator() = default;
  virtual at::Device device() const = 0;
  virtual std::shared_ptr<NcclDone> all_gather(const at::Tensor& output, const at::Tensor& input) = 0;
  virtual std::shared_ptr<NcclDone> reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) = 0;
  virtual std::shared_ptr<NcclDone> all_reduce(const at::Tensor& tensor, ReduceOp op) = 0;
  virtual std::shared_ptr<NcclDone> broadcast(const at::Tensor& tensor, int root) = 0;
  // Row counts per peer as in all_to_all_single (rows: dim 0); row_numel elements per row.
  virtual std::shared_ptr<NcclDone> all_to_all(const at::Tensor& output, const at::Tensor& input,
                                               const std::vector<int64_t>& output_rows,
                                               const std::vector<int64_t>& input_rows, int64_t row_numel) = 0;
};

// Collective over the group: the engine runtime::nccl_engine() picks (cuda_plugin.h),
// joined through `store` (keys under `key`), on `device`, with collectives timing out after
// `timeout`. Throws CommError for an unknown FSDPP_NCCL_ENGINE.
std::unique_ptr<NcclCommunicator> connect_nccl(const c10::intrusive_ptr<c10d::Store>& store, const std::string& key,
                                               int rank, int size, at::Device device, std::chrono::milliseconds timeout,
                                               std::string label);

// c10d's ProcessGroupNCCL as an NcclCommunicator (nccl_process_group.cpp).
std::unique_ptr<NcclCommunicator> connect_process_group_nccl(const c10::intrusive_ptr<c10d::Store>& store,
                                                             const std::string& key, int rank, int size,
                                                             at::Device device, std::chrono::milliseconds timeout,
                                                             std::string label);

class NcclGroup final : public NcclCommunicator {
 public:
  // Collective over the group: rank 0 creates the NCCL id and publishes it in `store`
  // under `key` (no store needed for a group of one); all ranks join within `timeout`.
  // `device` is the CUDA device of this rank.
  static std::unique_ptr<NcclGroup> connect(c10d::Store* store, const std::string& key, int rank, int size,
                                            at::Device device, std::chrono::milliseconds timeout, std::string label);
  ~NcclGroup() override;
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  at::Device device() const override;

  // Avg is ncclAvg; bf16/fp16 reduce in NCCL's own order (not the Gloo path's rank-order
  // fp32 sum), so results are deterministic only per NCCL setup.
  std::shared_ptr<NcclDone> all_gather(const at::Tensor& output, const at::Tensor& input) override;
  std::shared_ptr<NcclDone> reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  std::shared_ptr<NcclDone> all_reduce(const at::Tensor& tensor, ReduceOp op) override;
  std::shared_ptr<NcclDone> broadcast(const at::Tensor& tensor, int root) override;
  std::shared_ptr<NcclDone> all_to_all(const at::Tensor& output, const at::Tensor& input,
                                       const std::vector<int64_t>& output_rows, const std::vector<int64_t>& input_rows,
                                       int64_t row_numel) override;

  // Blocks the host until every collective issued so far is done (or the watchdog fired).
  void synchronize();

  struct Impl;

 private:
  explicit NcclGroup(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Whether CUDA tensors of a group can use NCCL: one GPU per local rank.
bool nccl_usable(int local_world_size);

}  // namespace fsdpp::comm
