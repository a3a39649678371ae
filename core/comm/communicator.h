// Communicator: the collectives every layer of fsdpp uses, over LibTorch's c10d.
//
// Contract
// - All ranks of a group must issue the same collectives in the same order (as with any
//   process group). Collectives run in issue order on one communication thread per
//   communicator, so *_async calls return at once and overlap with the caller's compute.
// - Tensors must be on the CPU (Gloo) or, in CUDA builds, on the GPU (NCCL); output and
//   input share a dtype. Non-contiguous tensors are handled by a contiguous copy.
// - Sum/Avg of bf16 and fp16 accumulate in fp32 and round once; fp32/fp64/integer sums
//   add the ranks' contributions in rank order, so results are bitwise reproducible.
// - Any failure (peer gone, timeout, bad arguments) throws CommError naming the op, the
//   group and the rank, and leaves the communicator broken: every later call throws too.
//   With peers, the message leads with the cause as far as it can be known (failure_board.h):
//   the rank that failed and its own message, a peer process that is gone, or the store's
//   host gone; a rank blocked in a collective learns of a posted failure within a second.
// - The TCPStore (hosted by world rank 0) and Gloo listen on 127.0.0.1 only when the master
//   address is loopback; another master address makes them listen where peers can reach.
// - Thread-safe for issuing from one thread; stats() may be read from any thread.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/comm/comm_stats.h"
#include "core/comm/rendezvous.h"

namespace fsdpp::comm {

enum class ReduceOp { Sum, Avg, Max };
const char* to_string(ReduceOp op);

class CommError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct CommOptions {
  // Limit for each collective and for joining the world; a collective still not done
  // after this raises CommError on the ranks that waited.
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
  std::string name = "world";
};

// Handle of an asynchronous collective.
class CommWork {
 public:
  CommWork() = default;
  // Blocks until the collective finished; rethrows its failure as CommError. Idempotent.
  void wait();
  bool completed() const;

  struct State;

 private:
  friend struct CommWorkAccess;  // comm_work_state.h: how backends make and reach works
  explicit CommWork(std::shared_ptr<State> state) : state_(std::move(state)) {}
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  // Joins the world: rank 0 hosts the TCPStore at master_addr:master_port, the others
  // connect to it; then the backend connects every pair. World size 1 needs no store.
  static std::shared_ptr<Communicator> connect(const WorldSpec& world, const CommOptions& options = {});

  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;

  // output (size()*k elements) = the ranks' inputs (k elements each) concatenated in
  // rank order; like all_gather_into_tensor.
  CommWork all_gather_into_async(at::Tensor output, at::Tensor input);
  // output (k elements) = op over ranks of input[rank()*k, (rank()+1)*k); like
  // reduce_scatter_tensor.
  CommWork reduce_scatter_async(at::Tensor output, at::Tensor input, ReduceOp op);
  // In place: tensor = op over ranks of tensor.
  CommWork all_reduce_async(at::Tensor tensor, ReduceOp op);
  // In place: tensor = root's tensor.
  CommWork broadcast_async(at::Tensor tensor, int root);
  // Rows (dim 0) of input go to ranks in order, input_splits[j] rows to rank j; output
  // receives output_splits[j] rows from rank j. Empty splits mean equal splits. Like
  // all_to_all_single.
  CommWork all_to_all_single_async(at::Tensor output, at::Tensor input, std::vector<int64_t> output_splits = {},
                                   std::vector<int64_t> input_splits = {});
  CommWork barrier_async();

  void all_gather_into(at::Tensor output, at::Tensor input) { all_gather_into_async(output, input).wait(); }
  void reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op) {
    reduce_scatter_async(output, input, op).wait();
  }
  void all_reduce(at::Tensor tensor, ReduceOp op) { all_reduce_async(tensor, op).wait(); }
  void broadcast(at::Tensor tensor, int root) { broadcast_async(tensor, root).wait(); }
  void all_to_all_single(at::Tensor output, at::Tensor input, std::vector<int64_t> output_splits = {},
                         std::vector<int64_t> input_splits = {}) {
    all_to_all_single_async(output, input, std::move(output_splits), std::move(input_splits)).wait();
  }
  void barrier() { barrier_async().wait(); }

  // A communicator over the listed world ranks (this rank must be one of them). Every
  // member calls it with the same ranks and name; the name must be unique in the world.
  std::shared_ptr<Communicator> subgroup(const std::vector<int>& ranks, const std::string& name);

  CommStats& stats();
  bool broken() const;

  // Finishes queued work, then waits (up to the timeout) until every rank got here, so
  // that no rank tears down its connections while a peer still uses them. Idempotent;
  // the destructor calls it, except while an exception unwinds (then it acts as abort()).
  void shutdown();

  // For a rank about to exit after a failure: posts it on the world's failure board
  // (`failed_here`: the failure began on this rank, so peers name it and print `message`;
  // otherwise this rank is a casualty of a failed collective), signs out, and on the
  // store's host waits up to min(timeout, 3 s) for the others to read the board and leave.
  // Then abort(message).
  void fail(const std::string& message, bool failed_here);

  // For a process about to exit after a failure: marks the group broken and skips the
  // teardown handshake; work still in flight is abandoned (its memory is leaked, not
  // waited for), so the caller can exit at once instead of waiting for the timeout.
  void abort(const std::string& reason);

  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fsdpp::comm
