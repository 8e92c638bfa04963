// Calibration statistics and the seed's static quantization parameters: min / max exact, the
// histogram's quantiles within its 1.1 % resolution of the exact order statistic, and the
// asymmetric (scale = (max - min) / 255, zero point = round(-min / scale)) and symmetric formulas
// on hand-computed cases.
#include "engine/calibration.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/rng.h"

namespace ib {
namespace {

ActivationStats stats_of(const std::vector<float>& v) {
  ActivationStats s;
  s.observe(v.data(), static_cast<int64_t>(v.size()));
  return s;
}

TEST(Calibration, MinMaxIsExactAndTheSeedsFormulaGivesScaleAndZeroPoint) {
  const ActivationStats s = stats_of({-1.0f, 3.0f, 0.5f, NAN, INFINITY});
  EXPECT_EQ(s.count(), 3);
  EXPECT_EQ(s.non_finite(), 2);
  EXPECT_EQ(s.min(), -1.0f);
  EXPECT_EQ(s.max(), 3.0f);
  const auto asym =
      static_activation_quant(s, CalibrationMethod::kMinMax, 1.0, ActivationScheme::kAsymmetric);
  EXPECT_FLOAT_EQ(asym.scale, 4.0f / 255.0f);
  EXPECT_EQ(asym.zero_point, 64);  // round(1 / (4 / 255)) = round(63.75)
  const auto sym =
      static_activation_quant(s, CalibrationMethod::kMinMax, 1.0, ActivationScheme::kSymmetric);
  EXPECT_FLOAT_EQ(sym.scale, 3.0f / 127.0f);
  EXPECT_EQ(sym.zero_point, 0);
}

TEST(Calibration, TheRangeIncludesZeroAndAnEmptyRangeHasScaleOne) {
  const auto positive = static_activation_quant(
      stats_of({1.0f, 2.0f, 3.0f}), CalibrationMethod::kMinMax, 1.0, ActivationScheme::kAsymmetric);
  EXPECT_FLOAT_EQ(positive.scale, 3.0f / 255.0f);
  EXPECT_EQ(positive.zero_point, 0);
  const auto negative = static_activation_quant(
      stats_of({-2.0f, -1.0f}), CalibrationMethod::kMinMax, 1.0, ActivationScheme::kAsymmetric);
  EXPECT_FLOAT_EQ(negative.scale, 2.0f / 255.0f);
  EXPECT_EQ(negative.zero_point, 255);
  for (const auto scheme : {ActivationScheme::kAsymmetric, ActivationScheme::kSymmetric}) {
    const auto zeros = static_activation_quant(stats_of({0.0f, 0.0f}),
                                               CalibrationMethod::kPercentile, 0.99, scheme);
    EXPECT_EQ(zeros.scale, 1.0f);
    EXPECT_EQ(zeros.zero_point, 0);
  }
  EXPECT_EQ(ActivationStats().quantile(0.5), 0.0f);
}

TEST(Calibration, QuantilesAreWithinTheHistogramsResolution) {
  Rng rng(5);
  std::vector<float> v(200000);
  for (float& x : v) x = static_cast<float>(rng.normal()) * 3.0f;
  const ActivationStats s = stats_of(v);
  std::vector<float> sorted = v;
  std::sort(sorted.begin(), sorted.end());
  for (const double q : {0.0001, 0.01, 0.25, 0.5, 0.75, 0.99, 0.9999}) {
    const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size()))) - 1;
    const float exact = sorted[rank];
    EXPECT_NEAR(s.quantile(q), exact, std::fabs(exact) * 0.011 + 1e-6) << q;
  }
  EXPECT_EQ(s.quantile(0.0), s.min());
  EXPECT_EQ(s.quantile(1.0), s.max());
}

TEST(Calibration, PercentileIgnoresAnOutlierWhereMinMaxFollowsIt) {
  std::vector<float> v;
  for (int i = 1; i <= 100000; ++i) v.push_back(static_cast<float>(i) / 1000.0f);  // (0, 100]
  v.push_back(1.0e6f);                                                             // one outlier
  const ActivationStats s = stats_of(v);
  const auto minmax =
      static_activation_quant(s, CalibrationMethod::kMinMax, 1.0, ActivationScheme::kSymmetric);
  const auto pct = static_activation_quant(s, CalibrationMethod::kPercentile, 0.9999,
                                           ActivationScheme::kSymmetric);
  EXPECT_FLOAT_EQ(minmax.scale, 1.0e6f / 127.0f);
  // The 0.9999 quantile of 100,001 values is the 99,991st: 99.991, to 1.1 %.
  EXPECT_NEAR(pct.scale * 127.0f, 99.991f, 99.991f * 0.011f);
}

}  // namespace
}  // namespace ib
