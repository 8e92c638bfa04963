#include "core/stats.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.h"

namespace ib {

double mean(std::span<const double> xs) {
  if (xs.empty()) return 0.0;
  return std::accumulate(xs.begin(), xs.end(), 0.0) / static_cast<double>(xs.size());
}

double percentile_sorted(std::span<const double> sorted, double p) {
  if (sorted.empty()) return 0.0;
  if (sorted.size() == 1) return sorted[0];
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = rank - static_cast<double>(lo);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * frac;
}

double percentile(std::span<const double> xs, double p) {
  std::vector<double> v(xs.begin(), xs.end());
  std::sort(v.begin(), v.end());
  return percentile_sorted(v, p);
}

double median(std::span<const double> xs) { return percentile(xs, 50.0); }

double stddev_population(std::span<const double> xs) {
  if (xs.empty()) return 0.0;
  const double m = mean(xs);
  double acc = 0.0;
  for (double x : xs) acc += (x - m) * (x - m);
  return std::sqrt(acc / static_cast<double>(xs.size()));
}

double coefficient_of_variation(std::span<const double> xs) {
  const double m = mean(xs);
  return m == 0.0 ? 0.0 : stddev_population(xs) / std::fabs(m);
}

Interval bootstrap_median_ci(std::span<const double> xs, double confidence, int resamples,
                             uint64_t seed) {
  if (xs.empty()) return {};
  Rng rng(seed);
  std::vector<double> medians;
  medians.reserve(static_cast<size_t>(resamples));
  std::vector<double> sample(xs.size());
  for (int r = 0; r < resamples; ++r) {
    for (auto& s : sample) {
      s = xs[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(xs.size()) - 1))];
    }
    medians.push_back(median(sample));
  }
  std::sort(medians.begin(), medians.end());
  const double tail = (1.0 - confidence) / 2.0 * 100.0;
  return {percentile_sorted(medians, tail), percentile_sorted(medians, 100.0 - tail)};
}

Spread spread_of(std::span<const double> xs) {
  Spread s;
  if (xs.empty()) return s;
  s.median = median(xs);
  s.min = *std::min_element(xs.begin(), xs.end());
  s.max = *std::max_element(xs.begin(), xs.end());
  if (xs.size() >= 5) s.ci95 = bootstrap_median_ci(xs, 0.95, 2000, 0);
  return s;
}

}  // namespace ib
