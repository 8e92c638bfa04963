// Coefficient of variation across runs and the flag above the threshold.
#include "report/stability.h"

#include <fmt/format.h>

namespace ib {

std::vector<std::string> Stability::unstable_keys() const {
  std::vector<std::string> out;
  for (const auto& m : metrics) {
    if (m.unstable) out.push_back(m.key);
  }
  return out;
}

Stability stability_of(const BenchmarkReport& r) {
  Stability s;
  s.runs = static_cast<int>(r.runs.size());
  if (r.config.contains("cv_threshold") && r.config["cv_threshold"].is_number()) {
    s.cv_threshold = r.config["cv_threshold"].get<double>();
  }
  if (s.runs < 2) return s;
  for (const auto& a : r.aggregate) {
    MetricStability m{a.key, a.label, coefficient_of_variation(a.per_run), false};
    // A standard deviation's own run-to-run spread is noise about noise: reported, not flagged.
    m.unstable = m.cv > s.cv_threshold && a.key.rfind("std_", 0) != 0;
    s.metrics.push_back(std::move(m));
  }
  return s;
}

std::string stability_warning(const Stability& s) {
  std::vector<std::string> names;
  for (const auto& m : s.metrics) {
    if (m.unstable) names.push_back(fmt::format("{} {:.1f}%", m.label, 100.0 * m.cv));
  }
  if (names.empty()) return "";
  std::string list;
  for (size_t i = 0; i < names.size() && i < 6; ++i) list += (i ? ", " : "") + names[i];
  if (names.size() > 6) list += fmt::format(" and {} more", names.size() - 6);
  return fmt::format(
      "Warning: unstable (!): {} of {} metrics vary across the {} runs by more than CV {:.0f}% "
      "({}); use more --runs or a quieter machine.",
      names.size(), s.metrics.size(), s.runs, 100.0 * s.cv_threshold, list);
}

nlohmann::json stability_json(const Stability& s) {
  return nlohmann::json{{"cv_threshold", s.cv_threshold},
                        {"cv_definition", "population std / |mean| of the per-run values"},
                        {"unstable_metrics", s.unstable_keys()},
                        {"bootstrap",
                         {{"applies", "runs >= 5"},
                          {"method", "percentile bootstrap of the median"},
                          {"confidence", 0.95},
                          {"resamples", kBootstrapResamples},
                          {"seed", kBootstrapSeed}}}};
}

}  // namespace ib
