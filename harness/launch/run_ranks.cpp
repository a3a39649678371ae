#include "harness/launch/run_ranks.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <c10/util/Exception.h>

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

std::string exception_message(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

int fail_rank(const std::exception& e, comm::Communicator* comm, int status_fd, const std::string& prefix) {
  std::string message = exception_message(e);
  if (comm != nullptr) comm->abort(message);
  std::fprintf(stderr, "%s%s\n", prefix.c_str(), message.c_str());
  report_status(status_fd, dynamic_cast<const comm::CommError*>(&e) ? Verdict::CommFailed : Verdict::Failed, message);
  return 1;
}

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
        return fail_rank(e, communicator.get(), status_fd, "rank " + std::to_string(rank) + " failed: ");
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
