#include "harness/launch/run_ranks.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include "core/runtime/threads.h"

namespace fsdpp::harness {
namespace {

std::filesystem::path make_shared_dir() {
  auto base = std::filesystem::temp_directory_path() / "fsdpp-ranks-XXXXXX";
  std::string pattern = base.string();
  if (::mkdtemp(pattern.data()) == nullptr)
    throw std::runtime_error("run_ranks: cannot create a temporary directory under " +
                             std::filesystem::temp_directory_path().string());
  return pattern;
}

}  // namespace

LaunchReport run_ranks(int world_size, const RankBody& body, const RunOptions& options) {
  auto shared_dir = make_shared_dir();
  int port = reserve_free_port();
  int threads = options.threads_per_rank > 0 ? options.threads_per_rank
                                             : runtime::default_threads_per_rank(world_size);
  auto spec_for_rank = [&](int rank) {
    ProcessSpec spec;
    spec.child_main = [&, rank](int status_fd) {
      runtime::configure_threads(threads);
      comm::WorldSpec world;
      world.rank = rank;
      world.world_size = world_size;
      world.local_rank = rank;
      world.local_world_size = world_size;
      world.master_addr = "127.0.0.1";
      world.master_port = port;
      world.source = "explicit";
      comm::CommOptions comm_options;
      comm_options.timeout = options.comm_timeout;
      std::shared_ptr<comm::Communicator> communicator;
      try {
        communicator = comm::Communicator::connect(world, comm_options);
        RankContext ctx{rank, world_size, *communicator, shared_dir, threads};
        body(ctx);
        communicator->shutdown();
      } catch (const std::exception& e) {
        if (communicator) communicator->abort(e.what());
        std::fprintf(stderr, "rank %d failed: %s\n", rank, e.what());
        report_status(status_fd, dynamic_cast<const comm::CommError*>(&e) ? harness::Verdict::CommFailed : harness::Verdict::Failed, e.what());
        return 1;
      }
      report_status(status_fd, Verdict::Ok);
      return 0;
    };
    return spec;
  };
  LaunchReport report;
  try {
    report = launch(world_size, spec_for_rank, options.launch);
  } catch (...) {
    std::filesystem::remove_all(shared_dir);
    throw;
  }
  std::error_code ignored;
  std::filesystem::remove_all(shared_dir, ignored);
  return report;
}

}  // namespace fsdpp::harness
