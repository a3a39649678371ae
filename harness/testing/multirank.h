// GoogleTest integration of run_ranks: write a test body once, run it on every rank.
#pragma once

#include <chrono>
#include <filesystem>

#include "harness/launch/run_ranks.h"

namespace fsdpp::harness {

// Runs body on world_size ranks. A failed EXPECT/ASSERT or an exception on any rank
// makes that rank fail; the launcher stops the others, and the current test fails with
// every failing rank, its message and its last output lines.
void expect_ranks_pass(int world_size, const RankBody& body, const RunOptions& options = {});

// The same run without failing the test: for tests about failures themselves.
LaunchReport run_ranks_with_gtest(int world_size, const RankBody& body, const RunOptions& options = {});

// Blocks until `path` exists (another rank's signal, written into RankContext::shared_dir),
// polling every millisecond; throws std::runtime_error naming the path after `timeout`.
void wait_for_file(const std::filesystem::path& path, std::chrono::milliseconds timeout);

}  // namespace fsdpp::harness
