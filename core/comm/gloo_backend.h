// GlooBackend: CPU collectives, every one built on Gloo's byte all-to-all
// (gloo_backend.cpp says how, and why). Collectives run in issue order on one
// communication thread per group: start_worker() starts it, stop_worker() runs what is
// queued and joins it. A rank blocked in a collective reads the group's failure board every
// second. Internal to core/comm/; host_staged_backend.h runs CUDA tensors through it too.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core/comm/backend.h"
#include "core/comm/group_state.h"

namespace fsdpp::comm {

class GlooBackend final : public CollectiveBackend {
 public:
  explicit GlooBackend(GroupState& group) : group_(group) {}
  GlooBackend(const GlooBackend&) = delete;
  GlooBackend& operator=(const GlooBackend&) = delete;

  // The group's connected Gloo process group (none for a group of one).
  void set_process_group(c10::intrusive_ptr<c10d::ProcessGroupGloo> process_group);
  const c10::intrusive_ptr<c10d::ProcessGroupGloo>& process_group() const { return gloo_; }

  // Starts the communication thread; returns once it applied the intra-op thread budget.
  void start_worker();
  // Runs whatever was queued, then joins the communication thread.
  void stop_worker();

  // CPU tensors.
  bool serves(const at::Tensor& t) const override { return t.device().is_cpu(); }

  CommWork all_gather_into(at::Tensor output, at::Tensor input, const std::string& what) override;
  CommWork reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op, const std::string& what) override;
  CommWork all_reduce(at::Tensor tensor, ReduceOp op, const std::string& what) override;
  CommWork broadcast(at::Tensor tensor, int root, const std::string& what) override;
  CommWork all_to_all_single(at::Tensor output, at::Tensor input, const AllToAllRows& rows,
                             const std::string& what) override;
  // Gloo's barrier, whatever devices the group's tensors are on.
  CommWork barrier(const std::string& what);

  // Releases the Gloo process group.
  void disconnect() override;

 private:
  CommWork submit(CollectiveKind kind, const std::string& what, std::function<void()> body);
  void alltoall_bytes(CollectiveKind kind, at::Tensor out, at::Tensor in, std::vector<int64_t> out_counts,
                      std::vector<int64_t> in_counts);
  void wait_for_work(const c10::intrusive_ptr<c10d::Work>& work);
  void all_gather_chunks(CollectiveKind kind, const at::Tensor& flat, const at::Tensor& mine,
                         const std::vector<int64_t>& chunk_bytes);

  GroupState& group_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo_;

  // The communication thread and its FIFO, under group_.mu.
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace fsdpp::comm
