// A unit's protocol as states (core/fsdp/fsdp_unit.h): a call the current state does not
// allow is an error naming the unit, its states and the call, never a crash or gradients
// read before they are written.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>

#include "core/fsdp/sharded_model.h"
#include "harness/testing/equivalence_check.h"

namespace fsdpp {
namespace {

using fsdp::FsdpUnit;
using ::testing::HasSubstr;

std::string logic_error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const std::logic_error& e) {
    return e.what();
  }
  return "(no std::logic_error)";
}

TEST(UnitProtocol, BackwardBeforeForwardIsNamedWithTheUnitItsStateAndTheCall) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case();
    auto net = model.build(1);
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, {}, model.wrap);
    FsdpUnit& unit = *sharded->units().front();
    ASSERT_EQ(unit.training_state(), FsdpUnit::TrainingState::Idle);
    const std::string prefix = "FSDP unit '" + unit.name() + "': ";
    EXPECT_THAT(logic_error_of([&] { unit.enter_pre_backward(); }),
                HasSubstr(prefix + "pre-backward in state SHARDED, IDLE: backward before forward"));
    EXPECT_THAT(logic_error_of([&] { unit.reduce_gradients_async(true); }),
                HasSubstr(prefix + "reduce_gradients_async in state SHARDED, IDLE: gradients are reduced in "
                                   "post-backward"));
    // Nothing was issued: the model still trains.
    model.loss(*net, model.batch(0, ctx.rank)).backward();
    EXPECT_EQ(unit.training_state(), FsdpUnit::TrainingState::Idle);  // the final callback ended the iteration
  });
}

TEST(UnitProtocol, ReadingGradientsWhileTheirReduceScatterIsInFlightIsNamed) {
  harness::expect_ranks_pass(2, [](harness::RankContext& ctx) {
    auto model = harness::tiny_transformer_case();
    auto net = model.build(1);
    auto sharded = fsdp::ShardedModel::create(net, ctx.comm, {}, model.wrap);
    FsdpUnit& unit = *sharded->units().back();  // the root: unsharded from its forward to its backward
    auto loss = model.loss(*net, model.batch(0, ctx.rank));
    ASSERT_EQ(unit.training_state(), FsdpUnit::TrainingState::Forward);
    // Its post-backward by hand, on both ranks alike, with a gradient of ones on every
    // parameter: the reduce-scatter is issued...
    ASSERT_TRUE(unit.enter_post_backward());
    for (auto& p : unit.params()) p.unsharded().mutable_grad() = at::ones_like(p.unsharded());
    unit.reduce_gradients_async(true);
    // ...and the sharded gradients it writes may not be read before finish_gradients().
    EXPECT_THAT(logic_error_of([&] { unit.gather_full(/*gradients=*/true); }),
                HasSubstr("FSDP unit '" + unit.name() +
                          "': gather_full(gradients) in state UNSHARDED, POST_BACKWARD, reduce-scatter in flight"));
    EXPECT_FALSE(unit.enter_post_backward());  // a second post-backward in one backward does nothing
    unit.finish_gradients();
    for (const auto& grad : unit.gather_full(/*gradients=*/true))
      EXPECT_TRUE(grad.eq(1).all().item<bool>());  // the average of the ranks' ones
  });
}

}  // namespace
}  // namespace fsdpp
