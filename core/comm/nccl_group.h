// NCCL for CUDA tensors (built only with FSDPP_WITH_CUDA). One ncclComm_t per group, bound
// to one GPU, with a dedicated stream. The stream semantics are c10d ProcessGroupNCCL's,
// which FSDP2 relies on for overlap:
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

class NcclGroup {
 public:
  // Collective over the group: rank 0 creates the NCCL id and publishes it in `store`
  // under `key` (no store needed for a group of one); all ranks join within `timeout`.
  // `device` is the CUDA device of this rank.
  static std::unique_ptr<NcclGroup> connect(c10d::Store* store, const std::string& key, int rank, int size,
                                            at::Device device, std::chrono::milliseconds timeout, std::string label);
  ~NcclGroup();
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;

  at::Device device() const;

  // Same layouts as Communicator's calls of the same names; tensors are contiguous CUDA
  // tensors on device(). Avg is ncclAvg; bf16/fp16 reduce in NCCL's own order (not the
  // Gloo path's rank-order fp32 sum), so results are deterministic only per NCCL setup.
  std::shared_ptr<NcclDone> all_gather(const at::Tensor& output, const at::Tensor& input);
  std::shared_ptr<NcclDone> reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op);
  std::shared_ptr<NcclDone> all_reduce(const at::Tensor& tensor, ReduceOp op);
  std::shared_ptr<NcclDone> broadcast(const at::Tensor& tensor, int root);
  // Row counts per peer as in all_to_all_single; bytes_per_row of the tensors' dtype.
  std::shared_ptr<NcclDone> all_to_all(const at::Tensor& output, const at::Tensor& input,
                                       const std::vector<int64_t>& output_rows, const std::vector<int64_t>& input_rows,
                                       int64_t row_numel);

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
