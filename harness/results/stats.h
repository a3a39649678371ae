// Robust statistics for benchmark samples: location and spread (median, quantiles, IQR,
// CV), the Mann-Whitney U test the regression gate uses, and a deterministic bootstrap
// confidence interval of the ratio of two medians. Pure functions of their inputs; every
// function throws std::invalid_argument on an empty sample (or one with NaN/Inf).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fsdpp::results {

// The q-quantile (0 <= q <= 1) by linear interpolation between order statistics: position
// q * (n - 1) in the sorted sample (Hyndman-Fan type 7, numpy.quantile's default).
double quantile(std::vector<double> values, double q);
double median(std::vector<double> values);
// quantile(0.75) - quantile(0.25).
double iqr(const std::vector<double>& values);
double mean(const std::vector<double>& values);
// Coefficient of variation: sample standard deviation (n - 1 denominator) / mean; 0 for a
// single value. Throws if the mean is 0.
double cv(const std::vector<double>& values);

enum class MannWhitneyMethod {
  Auto,    // Exact when min(n_x, n_y) < 8 and n_x + n_y <= kExactMaxTotal, else Normal
  Exact,   // the permutation distribution of the rank sum, enumerated (ties: mid-ranks)
  Normal,  // normal approximation, tie-corrected variance, continuity correction 0.5
};

struct MannWhitneyResult {
  double u_x = 0;      // U of the first sample: pairs (x_i, y_j) with x_i > y_j, ties count 1/2
  double p = 1;        // two-sided p-value, in [0, 1]
  bool exact = false;  // which method produced p
};

// Largest n_x + n_y for which Auto chooses the exact distribution (its cost grows as
// total^2 * min(n_x, n_y)^2).
constexpr size_t kExactMaxTotal = 1000;

// Two-sided Mann-Whitney U (Wilcoxon rank-sum) test of "x and y come from the same
// distribution". U_x = R_x - n_x (n_x + 1) / 2 with R_x the sum of x's mid-ranks in the
// pooled sample (the U1 that scipy.stats.mannwhitneyu reports).
//   Normal: z = (|U_x - n_x n_y / 2| - 0.5) / sigma, sigma^2 = n_x n_y / 12 *
//     ((N + 1) - sum(t^3 - t) / (N (N - 1))) over tie groups of size t; p = 2 * (1 - Phi(z)),
//     capped at 1 (same as scipy's method="asymptotic", use_continuity=True). p = 1 when
//     every value is tied (sigma = 0).
//   Exact: the distribution of R_x over all C(N, n_x) equally likely assignments of the
//     pooled mid-ranks to x (a permutation test conditional on the ties; with no ties it is
//     scipy's method="exact"); p = min(1, 2 * min(P(R <= R_obs), P(R >= R_obs))). Enumerated
//     by dynamic programming over the smaller sample's rank sums; asking for Exact when
//     N^2 * min(n_x, n_y)^2 > 2e9 throws (too costly).
MannWhitneyResult mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y,
                                 MannWhitneyMethod method = MannWhitneyMethod::Auto);

struct RatioInterval {
  double ratio = 0;  // median(numerator) / median(denominator)
  double low = 0;    // percentile bootstrap bounds at the requested confidence
  double high = 0;
};

// Percentile bootstrap CI of median(numerator) / median(denominator): `resamples` times,
// resample each sample with replacement independently and take the ratio of the medians;
// the bounds are the (1 - confidence) / 2 and (1 + confidence) / 2 quantiles (type 7) of
// those ratios. The generator is std::mt19937_64 seeded with `seed` and indices are drawn
// by multiply-shift (no std::uniform_int_distribution, whose output differs between
// standard libraries), so the result is the same on every platform. Throws unless every
// denominator value is > 0 (the ratios are of timings and rates).
RatioInterval bootstrap_median_ratio(const std::vector<double>& numerator, const std::vector<double>& denominator,
                                     double confidence = 0.95, int resamples = 2000, uint64_t seed = 20261122);

}  // namespace fsdpp::results
