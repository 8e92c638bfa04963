#include "engine/calibration.h"

#include <algorithm>
#include <cmath>

namespace ib {

ActivationStats::ActivationStats() : positive_(kBins, 0), negative_(kBins, 0) {}

int ActivationStats::bin_of(float magnitude) {
  const double octaves = std::log2(static_cast<double>(magnitude)) - kMinExponent;
  const double bin = std::floor(octaves * kBinsPerOctave);
  return static_cast<int>(std::clamp(bin, 0.0, static_cast<double>(kBins - 1)));
}

float ActivationStats::upper_edge(int bin) {
  return static_cast<float>(
      std::exp2(static_cast<double>(bin + 1) / kBinsPerOctave + kMinExponent));
}

void ActivationStats::observe(const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i];
    if (!std::isfinite(v)) {
      ++non_finite_;
      continue;
    }
    if (count_ == 0) {
      min_ = max_ = v;
    } else {
      min_ = std::min(min_, v);
      max_ = std::max(max_, v);
    }
    ++count_;
    if (v == 0.0f) {
      ++zeros_;
    } else if (v > 0.0f) {
      ++positive_[static_cast<size_t>(bin_of(v))];
    } else {
      ++negative_[static_cast<size_t>(bin_of(-v))];
    }
  }
}

float ActivationStats::quantile(double q) const {
  if (count_ == 0) return 0.0f;
  // The rank (1-based) of the order statistic: at least q of the observations at or below it.
  const auto rank = std::max<int64_t>(
      1, static_cast<int64_t>(std::ceil(std::clamp(q, 0.0, 1.0) * static_cast<double>(count_))));
  int64_t seen = 0;
  float v = max_;
  bool found = false;
  // Ascending values: negative bins from the largest magnitude down, zeros, positive bins up.
  for (int b = kBins - 1; b >= 0 && !found; --b) {
    seen += negative_[static_cast<size_t>(b)];
    if (seen >= rank) {
      v = -upper_edge(b);  // the bin's outer edge: the most negative value it may hold
      found = true;
    }
  }
  if (!found) {
    seen += zeros_;
    if (seen >= rank) {
      v = 0.0f;
      found = true;
    }
  }
  for (int b = 0; b < kBins && !found; ++b) {
    seen += positive_[static_cast<size_t>(b)];
    if (seen >= rank) {
      v = upper_edge(b);
      found = true;
    }
  }
  return std::clamp(v, min_, max_);
}

StaticActivationQuant static_activation_quant(const ActivationStats& stats,
                                              CalibrationMethod method, double percentile,
                                              ActivationScheme scheme) {
  float lo = stats.min(), hi = stats.max();
  if (method == CalibrationMethod::kPercentile) {
    lo = stats.quantile(1.0 - percentile);
    hi = stats.quantile(percentile);
  }
  lo = std::min(lo, 0.0f);
  hi = std::max(hi, 0.0f);
  StaticActivationQuant out;
  if (scheme == ActivationScheme::kSymmetric) {
    const float amax = std::max(-lo, hi);
    out.scale = amax > 0.0f ? amax / 127.0f : 1.0f;
    return out;
  }
  if (hi - lo > 0.0f) {
    out.scale = (hi - lo) / 255.0f;
    out.zero_point =
        static_cast<int32_t>(std::clamp(std::nearbyint(-lo / out.scale), 0.0f, 255.0f));
  }
  return out;
}

}  // namespace ib
