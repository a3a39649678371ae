// GoogleTest integration of run_ranks: write a test body once, run it on every rank.
#pragma once

#include "harness/launch/run_ranks.h"

namespace fsdpp::harness {

// Runs body on world_size ranks. A failed EXPECT/ASSERT or an exception on any rank
// makes that rank fail; the launcher stops the others, and the current test fails with
// every failing rank, its message and its last output lines.
void expect_ranks_pass(int world_size, const RankBody& body, const RunOptions& options = {});

// The same run without failing the test: for tests about failures themselves.
LaunchReport run_ranks_with_gtest(int world_size, const RankBody& body, const RunOptions& options = {});

}  // namespace fsdpp::harness
