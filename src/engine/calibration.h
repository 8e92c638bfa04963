// Static activation quantization from calibration (issue 13): an observer keeps, per matmul
// input, the statistics of its values over the calibration prompts; the seed's framework
// (chapter 2.3) derives one scale (and zero point) per tensor from them, and calibrate() sets them
// on an engine's INT8 W8A8 weights (backend/weight.h, static activation scales). The CPU and CUDA
// backends observe and run them.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/result.h"

namespace ib {

class Engine;

enum class CalibrationMethod { kMinMax, kPercentile };
enum class ActivationScheme { kSymmetric, kAsymmetric };
const char* calibration_method_name(CalibrationMethod m);  // "minmax", "percentile"
const char* activation_scheme_name(ActivationScheme s);    // "symmetric", "asymmetric"

// Min, max and a histogram of the observed values: magnitudes on a log scale per sign, from 2^-40
// to 2^40 with kBinsPerOctave bins per octave (each bin's edges 2^(1/64), 1.1 %, apart; smaller
// magnitudes fall in the first bin, larger ones in the last), zeros counted apart. So a
// percentile needs no second pass over the data and no range known in advance.
class ActivationStats {
 public:
  static constexpr int kBinsPerOctave = 64;
  static constexpr int kMinExponent = -40;
  static constexpr int kOctaves = 80;
  static constexpr int kBins = kBinsPerOctave * kOctaves;

  ActivationStats();
  // Non-finite values are counted apart and otherwise ignored.
  void observe(const float* x, int64_t n);
  int64_t count() const { return count_; }  // finite values observed
  int64_t non_finite() const { return non_finite_; }
  float min() const { return min_; }  // 0 before any value
  float max() const { return max_; }
  // The smallest v such that at least a fraction q (0..1) of the observations are <= v, to the
  // histogram's resolution (a bin's outer edge: within 1.1 % of the exact order statistic for
  // magnitudes in range), clamped into [min, max]; 0 before any value.
  float quantile(double q) const;
  // Adds other's observations (the histograms share their bins: exact).
  void merge(const ActivationStats& other);

 private:
  static int bin_of(float magnitude);
  static float upper_edge(int bin);  // the bin's larger magnitude
  std::vector<int64_t> positive_, negative_;
  int64_t zeros_ = 0, count_ = 0, non_finite_ = 0;
  float min_ = 0.0f, max_ = 0.0f;
};

// x ~ scale * (q - zero_point): asymmetric, q in [0, 255] (uint8); symmetric, zero_point 0 and q
// in [-127, 127].
struct StaticActivationQuant {
  float scale = 1.0f;
  int32_t zero_point = 0;
};

// The calibrated range [lo, hi] is [min, max] (kMinMax) or the quantiles 1 - p and p of the
// observations (kPercentile, p in (0.5, 1], e.g. 0.9999), widened to include 0. Asymmetric per
// tensor, the seed's formula: scale = (hi - lo) / 255, zero_point = round(-lo / scale) (then in
// [0, 255]). Symmetric: scale = max(-lo, hi) / 127. A range of zero width gives scale 1.
StaticActivationQuant static_activation_quant(const ActivationStats& stats,
                                              CalibrationMethod method, double percentile,
                                              ActivationScheme scheme);

struct CalibrationOptions {
  CalibrationMethod method = CalibrationMethod::kMinMax;
  double percentile = 0.9999;  // kPercentile
  ActivationScheme scheme = ActivationScheme::kAsymmetric;
};

// Runs each prompt through the engine (its prefill and one generated token; the engine must be
// idle) with the backend observing every matmul input, then sets static activation parameters
// on each layer's INT8 W8A8 matmul weights from what their inputs held (asymmetric: with the
// weight's row sums, QuantOps::weight_row_sums, added to the model's storage), records the
// engine's decode graphs again, and resets its step profile (Engine::reset_profile), so a
// benchmark after it profiles its own steps. User errors: no prompts, a model whose matmul
// weights are not int8-w8a8, a backend that cannot observe, a weight none of the prompts reached.
Status calibrate(Engine& engine, const std::vector<std::vector<int32_t>>& prompts,
                 const CalibrationOptions& options);

}  // namespace ib
