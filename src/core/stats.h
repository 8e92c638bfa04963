// Descriptive statistics with the definitions of docs/metrics.md: percentiles by linear
// interpolation between closest ranks (numpy's default), population standard deviation.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace ib {

double mean(std::span<const double> xs);
double median(std::span<const double> xs);
double stddev_population(std::span<const double> xs);
// p in [0, 100]. Empty input returns 0.
double percentile(std::span<const double> xs, double p);
// Same, on data already sorted ascending.
double percentile_sorted(std::span<const double> sorted, double p);

// Coefficient of variation = population std / mean (0 when mean is 0).
double coefficient_of_variation(std::span<const double> xs);

struct Interval {
  double lo = 0;
  double hi = 0;
};
// Percentile bootstrap CI of the median; deterministic for a given seed.
Interval bootstrap_median_ci(std::span<const double> xs, double confidence, int resamples,
                             uint64_t seed);

// Median with min and max, as reported across runs.
struct Spread {
  double median = 0;
  double min = 0;
  double max = 0;
  std::optional<Interval> ci95;  // only for 5 or more values
};
Spread spread_of(std::span<const double> xs);

}  // namespace ib
