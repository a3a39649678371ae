// run_ranks: the same body on N ranks, each a forked process with its own Communicator
// joined over a TCPStore on a free port (loopback unless RunOptions::master_addr).
#pragma once

#include <chrono>
#include <filesystem>
#include <functional>

#include "core/comm/communicator.h"
#include "harness/launch/launcher.h"

namespace fsdpp::harness {

// What a rank body can see.
struct RankContext {
  int rank = 0;
  int world_size = 1;
  comm::Communicator& comm;
  std::filesystem::path shared_dir;  // one directory for the whole group, removed afterwards
  int threads = 1;                   // intra-op threads this rank was given
};

struct RunOptions {
  LaunchOptions launch;
  // Per-collective limit inside the ranks: a rank whose peer vanished errors out by
  // itself after this, even without the launcher's help.
  std::chrono::milliseconds comm_timeout{std::chrono::seconds(60)};
  int threads_per_rank = 0;               // 0: floor(cores / world_size), at least 1
  std::string master_addr = "127.0.0.1";  // where rank 0 hosts the TCPStore
  // Runs in each rank's process just before it connects (tests of the connect phase: a
  // rank that never arrives, or dies while the others connect).
  std::function<void(int rank)> before_connect;
};

using RankBody = std::function<void(RankContext&)>;

// The message of an exception, without LibTorch's C++ backtrace (c10::Error::what()
// appends one).
std::string exception_message(const std::exception& e);

// What a rank does when its work throws: post the failure on the world's failure board
// (a failed collective as a casualty; Communicator::fail) and abandon its communicator (no
// teardown handshake: peers may be gone; a world of one is shut down in order instead, so that
// its communication thread is joined before the process exits), print "<prefix><message>" to stderr, and report the
// verdict on the status pipe (a failed collective as a casualty). Returns exit code 1.
int fail_rank(const std::exception& e, comm::Communicator* comm, int status_fd, const std::string& prefix);

// Forks world_size ranks (fork happens before any CUDA use in the child), runs body on
// each, and reports. A body fails by throwing; the message reaches the report.
LaunchReport run_ranks(int world_size, const RankBody& body, const RunOptions& options = {});

}  // namespace fsdpp::harness
