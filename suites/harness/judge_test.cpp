// harness/oracle/tolerance.h's float64 judge, on errors placed by hand: within its dtype's
// policy passes; beyond it, only within twice the peer's error, with no more elements
// outside the policy than the peer, and under the cap.
#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include "harness/oracle/tolerance.h"

namespace fsdpp::harness {
namespace {

// `truth` (float64, values near 0 where the policy's atol is the whole bar) in float32 with
// `error` added at the given elements.
at::Tensor off_by(const at::Tensor& truth, double error, std::initializer_list<int64_t> at) {
  auto t = truth.clone();
  for (auto i : at) t[i] += error;
  return t.to(at::kFloat);
}

at::Tensor truth() { return at::linspace(-1e-3, 1e-3, 100, at::kDouble); }

TEST(Float64Judge, WithinThePolicyPassesWhateverThePeer) {
  const auto within = off_by(truth(), 5e-6, {3});
  EXPECT_TRUE(judge_against_float64(within, truth(), off_by(truth(), 0, {})).ok);            // an exact peer
  EXPECT_TRUE(judge_against_float64(within, truth(), off_by(truth(), 5e-6, {3, 9})).ok);     // a peer as good
  EXPECT_TRUE(judge_against_float64(within, truth(), off_by(truth(), 1e-3, {1, 2, 3})).ok);  // a peer far off
}

TEST(Float64Judge, BeyondThePolicyPassesOnlyWithinTwiceThePeersErrorAndNoMoreElementsOutside) {
  const auto peer = off_by(truth(), 2e-5, {7});  // the precision's own error: 2e-5, one element outside
  EXPECT_TRUE(judge_against_float64(off_by(truth(), 3.5e-5, {50}), truth(), peer).ok);
  auto far = judge_against_float64(off_by(truth(), 4.5e-5, {50}), truth(), peer);
  EXPECT_FALSE(far.ok) << far.describe();
  EXPECT_FALSE(judge_against_float64(off_by(truth(), 2e-5, {50, 51}), truth(), peer).ok) << "two elements, not one";
  EXPECT_FALSE(judge_against_float64(off_by(truth(), 1.5e-5, {50}), truth(), off_by(truth(), 0, {})).ok)
      << "a peer within the policy leaves the policy as the bar";
}

TEST(Float64Judge, TheCapHoldsHoweverFarThePeerStrays) {
  const auto peer = off_by(truth(), 1e-3, {1, 2, 3});
  EXPECT_TRUE(judge_against_float64(off_by(truth(), 9e-5, {1}), truth(), peer).ok);
  EXPECT_FALSE(judge_against_float64(off_by(truth(), 1.1e-4, {1}), truth(), peer).ok);
}

}  // namespace
}  // namespace fsdpp::harness
