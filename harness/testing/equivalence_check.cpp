#include "harness/testing/equivalence_check.h"

#include <gtest/gtest.h>

namespace fsdpp::harness {

void expect_equivalent(int world_size, const std::function<EquivModel()>& model, const EquivConfig& config,
                       const std::function<void(const EquivReport&)>& inspect) {
  expect_ranks_pass(world_size, [&](RankContext& ctx) {
    auto report = run_equivalence(ctx.comm, model(), config);
    if (ctx.rank != 0) return;
    EXPECT_TRUE(report.ok()) << report.table();
    if (inspect) inspect(report);
  });
}

}  // namespace fsdpp::harness
