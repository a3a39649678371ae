#include "harness/testing/multirank.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <thread>

namespace fsdpp::harness {

LaunchReport run_ranks_with_gtest(int world_size, const RankBody& body, const RunOptions& options) {
  // In a forked rank, gtest still records assertion results for the current test (the
  // child has a copy of its state), so a failure is visible through HasFailure().
  auto checked = [&body](RankContext& ctx) {
    body(ctx);
    if (::testing::Test::HasFailure())
      throw std::runtime_error("a GoogleTest assertion failed on rank " + std::to_string(ctx.rank) +
                               " (its output shows which)");
  };
  return run_ranks(world_size, checked, options);
}

void expect_ranks_pass(int world_size, const RankBody& body, const RunOptions& options) {
  auto report = run_ranks_with_gtest(world_size, body, options);
  EXPECT_TRUE(report.ok()) << "on " << world_size << " ranks: " << report.summary();
}

void wait_for_file(const std::filesystem::path& path, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!std::filesystem::exists(path)) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("no " + path.string() + " after " + std::to_string(timeout.count()) + " ms");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace fsdpp::harness
