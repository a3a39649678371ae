#include "harness/launch/run_ranks.h"

#include <c10/util/Exception.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/runtime/threads.h"
#include "harness/testing/temp_dir.h"

namespace fsdpp::harness {
namespace {}  // namespace

std::string exception_message(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

int fail_rank(const std::exception& e, comm::Communicator* comm, int status_fd, const std::string& prefix) {
  std::string message = exception_message(e);
  if (comm != nullptr) {
    // With peers, post the failure on the board (peers then name this rank, or this rank
    // signs out as a casualty) and abandon the group: one may be gone, and our
    // communication thread may be stuck in a collective with it. Alone, nothing can be stuck: shut down in order,
    // which joins the communication thread. Abandoning it there would let it run on
    // through exit(), racing LibTorch's static destructors (its start-up calls
    // at::init_num_threads(), which rebuilds the process-wide pthreadpool that exit()
    // destroys: heap corruption, SIGABRT, or a hang in pthreadpool_destroy).
    if (comm->size() == 1) {
      try {
        comm->shutdown();
      } catch (...) {
        comm->abort(message);
      }
    } else {
      comm->fail(message, dynamic_cast<const comm::CommError*>(&e) == nullptr);
    }
  }
  std::fprintf(stderr, "%s%s\n", prefix.c_str(), message.c_str());
  report_status(status_fd, dynamic_cast<const comm::CommError*>(&e) ? Verdict::CommFailed : Verdict::Failed, message);
  return 1;
}

LaunchReport run_ranks(int world_size, const RankBody& body, const RunOptions& options) {
  TempDir shared("fsdpp-ranks");  // removed when the run is over
  const auto& shared_dir = shared.path();
  int port = reserve_free_port();
  int threads = options.threads_per_rank > 0 ? options.threads_per_rank : runtime::default_threads_per_rank(world_size);
  auto spec_for_rank = [&](int rank) {
    ProcessSpec spec;
    spec.child_main = [&, rank](int status_fd) {
      runtime::configure_threads(threads);
      comm::WorldSpec world;
      world.rank = rank;
      world.world_size = world_size;
      world.local_rank = rank;
      world.local_world_size = world_size;
      world.master_addr = options.master_addr;
      world.master_port = port;
      world.source = "explicit";
      comm::CommOptions comm_options;
      comm_options.timeout = options.comm_timeout;
      std::shared_ptr<comm::Communicator> communicator;
      try {
        if (options.before_connect) options.before_connect(rank);
        communicator = comm::Communicator::connect(world, comm_options);
        RankContext ctx{rank, world_size, *communicator, shared_dir, threads};
        body(ctx);
        communicator->shutdown();
      } catch (const std::exception& e) {
        return fail_rank(e, communicator.get(), status_fd, "rank " + std::to_string(rank) + " failed: ");
      }
      report_status(status_fd, Verdict::Ok);
      return 0;
    };
    return spec;
  };
  return launch(world_size, spec_for_rank, options.launch);
}

}  // namespace fsdpp::harness
