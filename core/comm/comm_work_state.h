// CommWork's shared state, and how a backend makes a CommWork. Internal to core/comm/:
// communicator.h declares CommWork, communicator.cpp defines its wait() and completed(),
// and the backends (backend.h) create works through CommWorkAccess.
#pragma once

#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/comm/comm_stats.h"
#include "core/comm/communicator.h"

namespace fsdpp::comm {

struct CommWork::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty on success
  CollectiveKind kind = CollectiveKind::Barrier;
  CommStats* stats = nullptr;
  bool waited = false;
  // Runs once in the first wait() after success, in the waiting thread: the caller's CUDA
  // stream joins an NCCL collective, or host results are copied back to the device.
  std::function<void()> on_wait;
  // Device-side completion (NCCL): done on the host at issue, finished when this says so.
  std::function<bool()> device_done;
};

// The backends' way to make a CommWork from its state, and to reach the state of one.
struct CommWorkAccess {
  static CommWork make(std::shared_ptr<CommWork::State> state) { return CommWork(std::move(state)); }
  static const std::shared_ptr<CommWork::State>& state(const CommWork& work) { return work.state_; }
};

}  // namespace fsdpp::comm
