// What a communicator's front end (communicator.cpp) and its backends (backend.h) share:
// the group's identity, store, failure board and stats, and whether it is shut down or
// broken. Internal to core/comm/.
#pragma once

#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "core/comm/comm_stats.h"
#include "core/comm/failure_board.h"

namespace fsdpp::comm {

struct GroupState {
  std::string name;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{};
  c10::intrusive_ptr<c10d::Store> store;  // shared by the world and its subgroups
  std::shared_ptr<FailureBoard> board;    // the world's, shared by its subgroups; null alone
  int local_world_size = 1;               // decides whether CUDA tensors can use NCCL (one GPU per rank)
  CommStats stats;

  // Guards the three fields below and the Gloo backend's work queue: one lock, so that
  // nothing is queued once shutdown() has begun to stop the communication thread.
  std::mutex mu;
  bool is_shut_down = false;
  bool aborted = false;
  std::string broken_reason;  // set once, under mu

  std::string where() const {
    return "on group '" + name + "' (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  }

  std::string broken() {
    std::lock_guard<std::mutex> lock(mu);
    return broken_reason;
  }

  // Records `reason` as what broke the group, unless an earlier failure already did.
  void mark_broken(const std::string& reason) {
    std::lock_guard<std::mutex> lock(mu);
    if (broken_reason.empty()) broken_reason = reason;
  }
};

// The first line of an exception's message (c10d and Gloo append stack traces).
inline std::string first_line_of(const std::string& text) {
  auto nl = text.find('\n');
  return nl == std::string::npos ? text : text.substr(0, nl);
}

}  // namespace fsdpp::comm
