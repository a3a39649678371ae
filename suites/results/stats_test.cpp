// harness/results/stats.h against values worked by hand, scipy's documented example and
// brute-force enumeration (the expected numbers are in the comments).
#include "harness/results/stats.h"

#include <gtest/gtest.h>

#include <limits>
#include <stdexcept>

#include "harness/testing/synthetic_results.h"

namespace fsdpp::results {
namespace {

TEST(Stats, MedianOfOddAndEvenSamples) {
  EXPECT_DOUBLE_EQ(median({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({7}), 7);
}

TEST(Stats, QuantileInterpolatesLinearlyLikeNumpy) {
  // numpy.quantile([1, 2, 3, 4], 0.25) == 1.75 (position 0.25 * 3 = 0.75)
  EXPECT_DOUBLE_EQ(quantile({4, 3, 2, 1}, 0.25), 1.75);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4}, 0), 1);
  EXPECT_DOUBLE_EQ(quantile({1, 2, 3, 4}, 1), 4);
  EXPECT_DOUBLE_EQ(quantile({10, 20}, 0.9), 19);
  EXPECT_THROW(quantile({1, 2}, 1.5), std::invalid_argument);
}

TEST(Stats, InterquartileRangeOfOneToEight) {
  // q(0.75) = 1 + 0.75 * 7 = 6.25, q(0.25) = 1 + 0.25 * 7 = 2.75
  EXPECT_DOUBLE_EQ(iqr({8, 7, 6, 5, 4, 3, 2, 1}), 3.5);
}

TEST(Stats, CoefficientOfVariationUsesTheSampleStandardDeviation) {
  // mean 5, squared deviations sum to 32, s = sqrt(32 / 7)
  EXPECT_NEAR(cv({2, 4, 4, 4, 5, 5, 7, 9}), 0.427617987059879, 1e-12);
  EXPECT_DOUBLE_EQ(cv({3}), 0);
}

TEST(Stats, EmptyOrNonFiniteSamplesAreRejected) {
  EXPECT_THROW(median({}), std::invalid_argument);
  EXPECT_THROW(mann_whitney_u({}, {1}), std::invalid_argument);
  EXPECT_THROW(mann_whitney_u({1, std::nan("")}, {1}), std::invalid_argument);
  EXPECT_THROW(mann_whitney_u({1}, {2, std::numeric_limits<double>::infinity()}), std::invalid_argument);
  EXPECT_THROW(mann_whitney_u({-std::numeric_limits<double>::infinity()}, {1}), std::invalid_argument);
}

TEST(MannWhitney, ScipyDocumentedExampleExact) {
  // scipy.stats.mannwhitneyu docs: males vs females, U1 = 17, exact p = 0.1111111111111111
  // (2 * 7 / C(9, 4): 7 of the 126 assignments have U >= 17).
  auto result = mann_whitney_u({19, 22, 16, 29, 24}, {20, 11, 17, 12}, MannWhitneyMethod::Exact);
  EXPECT_DOUBLE_EQ(result.u_x, 17);
  EXPECT_NEAR(result.p, 0.1111111111111111, 1e-14);
  EXPECT_TRUE(result.exact);
}

TEST(MannWhitney, ScipyDocumentedExampleNormalApproximation) {
  // scipy: method="asymptotic" gives p = 0.11134688653314041; by hand sigma = sqrt(20 * 10 / 12),
  // z = (17 - 10 - 0.5) / sigma = 1.5921, p = erfc(z / sqrt 2).
  auto result = mann_whitney_u({19, 22, 16, 29, 24}, {20, 11, 17, 12}, MannWhitneyMethod::Normal);
  EXPECT_DOUBLE_EQ(result.u_x, 17);
  EXPECT_NEAR(result.p, 0.11134688653314041, 1e-12);
  EXPECT_FALSE(result.exact);
}

TEST(MannWhitney, AutoIsExactForSmallSamples) {
  // Total separation of 3 vs 3: the most extreme of C(6, 3) = 20 assignments, p = 2 / 20.
  auto result = mann_whitney_u({1, 2, 3}, {4, 5, 6});
  EXPECT_TRUE(result.exact);
  EXPECT_DOUBLE_EQ(result.u_x, 0);
  EXPECT_NEAR(result.p, 0.1, 1e-15);
}

TEST(MannWhitney, ThreeAgainstThreeCanNeverReachOnePercent) {
  // Why the gate needs more than 3 samples per side: 0.1 is the smallest p there is.
  EXPECT_GE(mann_whitney_u({1, 2, 3}, {100, 200, 300}).p, 0.1 - 1e-15);
}

TEST(MannWhitney, ExactWithTiesMatchesBruteForceEnumeration) {
  // Mid-ranks 1, 3, 3, 3, 5.5, 5.5, 7.5, 7.5; R_x = 12.5, U_x = 2.5. Enumerating the 70
  // subsets of size 4: 7 have R <= 12.5, so p = 2 * 7 / 70 = 0.2.
  auto result = mann_whitney_u({1, 2, 2, 3}, {2, 3, 4, 4}, MannWhitneyMethod::Exact);
  EXPECT_DOUBLE_EQ(result.u_x, 2.5);
  EXPECT_NEAR(result.p, 0.2, 1e-14);
}

TEST(MannWhitney, NormalApproximationCorrectsTheVarianceForTies) {
  // Tie groups 1, 3, 2, 2: sum(t^3 - t) = 36; sigma^2 = 16 / 12 * (9 - 36 / 56);
  // z = (5.5 - 0.5) / sigma, p = 0.13416918012812581.
  auto result = mann_whitney_u({1, 2, 2, 3}, {2, 3, 4, 4}, MannWhitneyMethod::Normal);
  EXPECT_NEAR(result.p, 0.13416918012812581, 1e-12);
}

TEST(MannWhitney, AutoIsNormalFromEightPerSide) {
  // 8 vs 9 with a tied pair in y: U_x = 19, p = 0.11191088922137342 (worked as above).
  auto result = mann_whitney_u({1.1, 2.2, 3.3, 4.4, 5.5, 6.6, 7.7, 8.8}, {2, 3, 3, 9, 10, 11, 12, 13, 13});
  EXPECT_FALSE(result.exact);
  EXPECT_DOUBLE_EQ(result.u_x, 19);
  EXPECT_NEAR(result.p, 0.11191088922137342, 1e-12);
  // From eight: seven on the smaller side is still exact.
  EXPECT_TRUE(mann_whitney_u({1.1, 2.2, 3.3, 4.4, 5.5, 6.6, 7.7}, {2, 3, 3, 9, 10, 11, 12, 13, 13}).exact);
  EXPECT_TRUE(mann_whitney_u({2, 3, 3, 9, 10, 11, 12, 13, 13}, {1.1, 2.2, 3.3, 4.4, 5.5, 6.6, 7.7}).exact);
}

TEST(MannWhitney, SingleValueAgainstFourIsItsRankProbability) {
  // 5 is the largest of 5 values: P(R = 5) = 1 / 5, two-sided 0.4.
  auto result = mann_whitney_u({5}, {1, 2, 3, 4});
  EXPECT_DOUBLE_EQ(result.u_x, 4);
  EXPECT_NEAR(result.p, 0.4, 1e-15);
}

TEST(MannWhitney, AllValuesTiedGivesPOne) {
  EXPECT_DOUBLE_EQ(mann_whitney_u({2, 2, 2}, {2, 2}).p, 1);
  EXPECT_DOUBLE_EQ(mann_whitney_u(std::vector<double>(10, 2), std::vector<double>(10, 2)).p, 1);
}

TEST(MannWhitney, SymmetricInItsArguments) {
  const auto x = harness::noisy_samples(100, 0.05, 6, 1), y = harness::noisy_samples(104, 0.05, 40, 2);
  const auto xy = mann_whitney_u(x, y), yx = mann_whitney_u(y, x);
  EXPECT_NEAR(xy.p, yx.p, 1e-12);
  EXPECT_DOUBLE_EQ(xy.u_x + yx.u_x, 6.0 * 40);
}

TEST(MannWhitney, ExactAndNormalAgreeForModerateSamples) {
  const auto x = harness::noisy_samples(100, 0.05, 7, 3), y = harness::noisy_samples(103, 0.05, 60, 4);
  const auto exact = mann_whitney_u(x, y, MannWhitneyMethod::Exact);
  const auto normal = mann_whitney_u(x, y, MannWhitneyMethod::Normal);
  EXPECT_NEAR(exact.p, normal.p, 0.02) << exact.p << " vs " << normal.p;
}

TEST(MannWhitney, ClearShiftOfFifteenSamplesIsSignificant) {
  const auto base = harness::noisy_samples(100, 0.03, 15, 5), slow = harness::noisy_samples(115, 0.03, 15, 6);
  EXPECT_LT(mann_whitney_u(slow, base).p, 1e-4);
}

TEST(BootstrapRatio, ConstantSamplesGiveAPointInterval) {
  auto ci = bootstrap_median_ratio({10, 10, 10}, {5, 5});
  EXPECT_DOUBLE_EQ(ci.ratio, 2);
  EXPECT_DOUBLE_EQ(ci.low, 2);
  EXPECT_DOUBLE_EQ(ci.high, 2);
}

TEST(BootstrapRatio, TwoValueNumeratorSpansItsResampleMedians) {
  // Resamples of {1, 3} have medians 1, 2, 2, 3 (each 1/4): ratio 2, 95% CI [1, 3].
  auto ci = bootstrap_median_ratio({1, 3}, {1});
  EXPECT_DOUBLE_EQ(ci.ratio, 2);
  EXPECT_DOUBLE_EQ(ci.low, 1);
  EXPECT_DOUBLE_EQ(ci.high, 3);
}

TEST(BootstrapRatio, IsDeterministicForAFixedSeedAndCoversTheTrueRatio) {
  const auto slow = harness::noisy_samples(115, 0.03, 200, 7), base = harness::noisy_samples(100, 0.03, 200, 8);
  const auto a = bootstrap_median_ratio(slow, base), b = bootstrap_median_ratio(slow, base);
  EXPECT_EQ(a.low, b.low);
  EXPECT_EQ(a.high, b.high);
  EXPECT_LT(a.low, 1.15);
  EXPECT_GT(a.high, 1.15);
  EXPECT_GT(a.low, 1.10);  // 200 samples at 3% noise pin the ratio down
  EXPECT_LT(a.high, 1.20);
  const auto other_seed = bootstrap_median_ratio(slow, base, 0.95, 2000, 99);
  EXPECT_NE(other_seed.low, a.low);
}

TEST(BootstrapRatio, RejectsNonPositiveDenominators) {
  EXPECT_THROW(bootstrap_median_ratio({1}, {0, 1}), std::invalid_argument);
}

}  // namespace
}  // namespace fsdpp::results
