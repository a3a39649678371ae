#include "harness/results/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace fsdpp::results {
namespace {

void require_sample(const std::vector<double>& values, const char* what) {
  if (values.empty()) throw std::invalid_argument(std::string(what) + ": empty sample");
  for (double v : values)
    if (!std::isfinite(v)) throw std::invalid_argument(std::string(what) + ": sample contains NaN or Inf");
}

// Type-7 quantile of an already sorted sample.
double sorted_quantile(const std::vector<double>& sorted, double q) {
  const double position = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<size_t>(std::floor(position));
  const size_t above = std::min(below + 1, sorted.size() - 1);
  const double fraction = position - static_cast<double>(below);
  return sorted[below] + fraction * (sorted[above] - sorted[below]);
}

// Median of `v` in place (reorders it).
double median_in_place(std::vector<double>& v) {
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return (lower + upper) / 2;
}

// Mid-ranks of the pooled sample, doubled so that they are integers: a tie group occupying
// 1-based ranks a..b gets (a + b). Appends each tie group's size to `tie_sizes`.
std::vector<int64_t> doubled_midranks(const std::vector<double>& pooled, std::vector<int64_t>* tie_sizes) {
  std::vector<size_t> order(pooled.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return pooled[a] < pooled[b]; });
  std::vector<int64_t> ranks(pooled.size());
  for (size_t i = 0; i < order.size();) {
    size_t j = i;
    while (j + 1 < order.size() && pooled[order[j + 1]] == pooled[order[i]]) ++j;
    const auto doubled = static_cast<int64_t>(i + 1 + j + 1);
    for (size_t t = i; t <= j; ++t) ranks[order[t]] = doubled;
    tie_sizes->push_back(static_cast<int64_t>(j - i + 1));
    i = j + 1;
  }
  return ranks;
}

// Two-sided exact p of the rank sum of a subset of size k drawn from `ranks` (doubled
// mid-ranks) whose observed doubled sum is `observed`.
double exact_rank_sum_p(const std::vector<int64_t>& ranks, size_t k, int64_t observed) {
  std::vector<int64_t> sorted = ranks;
  std::sort(sorted.rbegin(), sorted.rend());
  const int64_t max_sum = std::accumulate(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(k), int64_t{0});
  // ways[j][s]: subsets of size j of the items seen so far with doubled rank sum s.
  std::vector<std::vector<double>> ways(k + 1, std::vector<double>(static_cast<size_t>(max_sum) + 1, 0.0));
  ways[0][0] = 1;
  for (int64_t r : ranks) {
    for (size_t j = k; j >= 1; --j) {
      auto& to = ways[j];
      const auto& from = ways[j - 1];
      for (int64_t s = max_sum; s >= r; --s) to[static_cast<size_t>(s)] += from[static_cast<size_t>(s - r)];
    }
  }
  double total = 0, at_most = 0, at_least = 0;
  for (int64_t s = 0; s <= max_sum; ++s) {
    const double w = ways[k][static_cast<size_t>(s)];
    total += w;
    if (s <= observed) at_most += w;
    if (s >= observed) at_least += w;
  }
  return std::min(1.0, 2 * std::min(at_most, at_least) / total);
}

}  // namespace

double quantile(std::vector<double> values, double q) {
  require_sample(values, "quantile");
  if (!(q >= 0 && q <= 1)) throw std::invalid_argument("quantile: q must be in [0, 1], got " + std::to_string(q));
  std::sort(values.begin(), values.end());
  return sorted_quantile(values, q);
}

double median(std::vector<double> values) {
  require_sample(values, "median");
  return median_in_place(values);
}

double iqr(const std::vector<double>& values) {
  require_sample(values, "iqr");
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  return sorted_quantile(sorted, 0.75) - sorted_quantile(sorted, 0.25);
}

double mean(const std::vector<double>& values) {
  require_sample(values, "mean");
  return std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
}

double cv(const std::vector<double>& values) {
  const double m = mean(values);
  if (m == 0) throw std::invalid_argument("cv: the mean is 0");
  if (values.size() == 1) return 0;
  double squares = 0;
  for (double v : values) squares += (v - m) * (v - m);
  return std::sqrt(squares / static_cast<double>(values.size() - 1)) / std::fabs(m);
}

MannWhitneyResult mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y, MannWhitneyMethod method) {
  require_sample(x, "mann_whitney_u (first sample)");
  require_sample(y, "mann_whitney_u (second sample)");
  const size_t nx = x.size(), ny = y.size(), n = nx + ny;
  std::vector<double> pooled = x;
  pooled.insert(pooled.end(), y.begin(), y.end());
  std::vector<int64_t> tie_sizes;
  const std::vector<int64_t> ranks = doubled_midranks(pooled, &tie_sizes);
  const int64_t doubled_rx =
      std::accumulate(ranks.begin(), ranks.begin() + static_cast<std::ptrdiff_t>(nx), int64_t{0});

  MannWhitneyResult result;
  result.u_x = static_cast<double>(doubled_rx) / 2 - static_cast<double>(nx * (nx + 1)) / 2;
  const size_t k = std::min(nx, ny);
  if (method == MannWhitneyMethod::Auto)
    method = k < 8 && n <= kExactMaxTotal ? MannWhitneyMethod::Exact : MannWhitneyMethod::Normal;

  if (method == MannWhitneyMethod::Exact) {
    const double cost = static_cast<double>(n) * n * k * k;
    if (cost > 2e9)
      throw std::invalid_argument("mann_whitney_u: exact distribution too costly for n_x=" + std::to_string(nx) +
                                  ", n_y=" + std::to_string(ny));
    // Enumerate the smaller sample's rank sum; its two-sided p equals the other's.
    const bool use_x = nx <= ny;
    const int64_t doubled_total = static_cast<int64_t>(n * (n + 1));  // sum of all doubled ranks
    const int64_t observed = use_x ? doubled_rx : doubled_total - doubled_rx;
    result.p = exact_rank_sum_p(ranks, k, observed);
    result.exact = true;
    return result;
  }

  const double mu = static_cast<double>(nx) * static_cast<double>(ny) / 2;
  double tie_term = 0;
  for (int64_t t : tie_sizes) tie_term += static_cast<double>(t) * t * t - static_cast<double>(t);
  const double dn = static_cast<double>(n);
  const double variance =
      static_cast<double>(nx) * static_cast<double>(ny) / 12 * ((dn + 1) - tie_term / (dn * (dn - 1)));
  if (!(variance > 0)) {
    result.p = 1;
    return result;
  }
  const double z = (std::fabs(result.u_x - mu) - 0.5) / std::sqrt(variance);
  result.p = z <= 0 ? 1.0 : std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return result;
}

RatioInterval bootstrap_median_ratio(const std::vector<double>& numerator, const std::vector<double>& denominator,
                                     double confidence, int resamples, uint64_t seed) {
  require_sample(numerator, "bootstrap_median_ratio (numerator)");
  require_sample(denominator, "bootstrap_median_ratio (denominator)");
  for (double v : denominator)
    if (!(v > 0)) throw std::invalid_argument("bootstrap_median_ratio: denominator values must be > 0");
  if (!(confidence > 0 && confidence < 1))
    throw std::invalid_argument("bootstrap_median_ratio: confidence must be in (0, 1)");
  if (resamples < 1) throw std::invalid_argument("bootstrap_median_ratio: resamples must be >= 1");

  std::mt19937_64 rng(seed);
  // Uniform index in [0, n) by multiply-shift: the same on every platform.
  auto draw = [&](size_t n) { return static_cast<size_t>((static_cast<unsigned __int128>(rng()) * n) >> 64); };
  auto resample_median = [&](const std::vector<double>& sample, std::vector<double>& buffer) {
    buffer.resize(sample.size());
    for (auto& v : buffer) v = sample[draw(sample.size())];
    return median_in_place(buffer);
  };

  RatioInterval interval;
  interval.ratio = median(numerator) / median(denominator);
  std::vector<double> ratios, buffer;
  ratios.reserve(static_cast<size_t>(resamples));
  for (int i = 0; i < resamples; ++i) {
    const double top = resample_median(numerator, buffer);
    const double bottom = resample_median(denominator, buffer);
    ratios.push_back(top / bottom);
  }
  std::sort(ratios.begin(), ratios.end());
  interval.low = sorted_quantile(ratios, (1 - confidence) / 2);
  interval.high = sorted_quantile(ratios, (1 + confidence) / 2);
  return interval;
}

}  // namespace fsdpp::results
