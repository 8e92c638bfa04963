// Run-to-run stability of a benchmark: per metric the coefficient of variation across runs
// (population std / |mean|), flagged above --cv-threshold (std_* metrics are not flagged)
// (result.json config "cv_threshold", default 5%); with 5 or more runs the bootstrap 95% CI of the
// median (spread_of: percentile bootstrap, 2000 resamples, seed 0) is reported beside it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "report/report.h"

namespace ib {

inline constexpr double kDefaultCvThreshold = 0.05;
inline constexpr int kBootstrapResamples = 2000;  // as spread_of() draws them
inline constexpr uint64_t kBootstrapSeed = 0;

struct MetricStability {
  std::string key;
  std::string label;
  double cv = 0;
  bool unstable = false;
};

struct Stability {
  double cv_threshold = kDefaultCvThreshold;
  int runs = 0;
  std::vector<MetricStability> metrics;  // one per aggregate metric, empty with < 2 runs
  std::vector<std::string> unstable_keys() const;
};

Stability stability_of(const BenchmarkReport& report);
// The one-line warning under the table; empty when nothing is unstable.
std::string stability_warning(const Stability& stability);
// result.json "stability" section.
nlohmann::json stability_json(const Stability& stability);

}  // namespace ib
