// Separable antialiased bicubic resizing in fixed point.
#include "vision/detail/bicubic_resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace ib::detail {

namespace {

// Keys' cubic convolution kernel with a = -0.5 (support 2), its outer piece in each library's
// order of operations (the weights must round alike).
double cubic(double x, FixedPointRule rule) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x >= 2.0) return 0.0;
  if (rule == FixedPointRule::kPil) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a;
}

// For each output index: the first input index and the fixed-point weights of its taps.
struct AxisTaps {
  std::vector<int64_t> first;
  std::vector<std::vector<int32_t>> weights;
  int precision_bits = 0;
};

AxisTaps axis_taps(int64_t in_size, int64_t out_size, FixedPointRule rule) {
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);
  const double filter_scale = std::max(scale, 1.0);
  const double inv_filter_scale = 1.0 / filter_scale;
  const double support = 2.0 * filter_scale;
  std::vector<std::vector<double>> real(static_cast<size_t>(out_size));
  AxisTaps taps;
  taps.first.resize(static_cast<size_t>(out_size));
  double max_weight = 0.0;
  for (int64_t o = 0; o < out_size; ++o) {
    const double center = (static_cast<double>(o) + 0.5) * scale;
    // Truncation toward zero, as both libraries cast; negative values clamp to 0 anyway.
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size);
    std::vector<double>& w = real[static_cast<size_t>(o)];
    double total = 0.0;
    for (int64_t i = lo; i < hi; ++i) {
      w.push_back(cubic((static_cast<double>(i) - center + 0.5) * inv_filter_scale, rule));
      total += w.back();
    }
    if (total != 0.0) {
      for (double& v : w) {
        v /= total;
        max_weight = std::max(max_weight, v);
      }
    }
    taps.first[static_cast<size_t>(o)] = lo;
  }
  if (rule == FixedPointRule::kPil) {
    taps.precision_bits = 22;
  } else {
    for (taps.precision_bits = 0; taps.precision_bits < 22; ++taps.precision_bits) {
      const double next = 0.5 + max_weight * static_cast<double>(1 << (taps.precision_bits + 1));
      if (static_cast<int>(next) >= (1 << 15)) break;
    }
  }
  const double one = static_cast<double>(1 << taps.precision_bits);
  taps.weights.resize(real.size());
  for (size_t o = 0; o < real.size(); ++o) {
    for (double v : real[o]) {
      // Rounded half away from zero by a truncating cast, as both libraries do.
      taps.weights[o].push_back(static_cast<int32_t>(v < 0 ? v * one - 0.5 : v * one + 0.5));
    }
  }
  return taps;
}

uint8_t clip8(int64_t sum, int precision_bits) {
  return static_cast<uint8_t>(std::clamp<int64_t>(sum >> precision_bits, 0, 255));
}

// The horizontal pass: every row to out_width_px.
Image resample_rows(const Image& in, int64_t out_width_px, const AxisTaps& taps) {
  Image out{out_width_px, in.height_px, {}};
  out.rgb.resize(static_cast<size_t>(out_width_px * in.height_px * 3));
  const int64_t round = int64_t{1} << (taps.precision_bits - 1);
  for (int64_t y = 0; y < in.height_px; ++y) {
    for (int64_t x = 0; x < out_width_px; ++x) {
      const auto& w = taps.weights[static_cast<size_t>(x)];
      const int64_t first = taps.first[static_cast<size_t>(x)];
      for (int c = 0; c < 3; ++c) {
        int64_t sum = round;
        for (size_t k = 0; k < w.size(); ++k) {
          sum += int64_t{in.at(y, first + static_cast<int64_t>(k), c)} * w[k];
        }
        out.rgb[static_cast<size_t>((y * out_width_px + x) * 3 + c)] =
            clip8(sum, taps.precision_bits);
      }
    }
  }
  return out;
}

// The vertical pass: every column to out_height_px.
Image resample_columns(const Image& in, int64_t out_height_px, const AxisTaps& taps) {
  Image out{in.width_px, out_height_px, {}};
  out.rgb.resize(static_cast<size_t>(in.width_px * out_height_px * 3));
  const int64_t round = int64_t{1} << (taps.precision_bits - 1);
  for (int64_t y = 0; y < out_height_px; ++y) {
    const auto& w = taps.weights[static_cast<size_t>(y)];
    const int64_t first = taps.first[static_cast<size_t>(y)];
    for (int64_t x = 0; x < in.width_px; ++x) {
      for (int c = 0; c < 3; ++c) {
        int64_t sum = round;
        for (size_t k = 0; k < w.size(); ++k) {
          sum += int64_t{in.at(first + static_cast<int64_t>(k), x, c)} * w[k];
        }
        out.rgb[static_cast<size_t>((y * in.width_px + x) * 3 + c)] =
            clip8(sum, taps.precision_bits);
      }
    }
  }
  return out;
}

}  // namespace

Image resize_bicubic(const Image& in, int64_t out_width_px, int64_t out_height_px,
                     FixedPointRule rule) {
  IB_ASSERT(in.width_px > 0 && in.height_px > 0 && out_width_px > 0 && out_height_px > 0,
            "resize of an empty image");
  Image out = in;
  // Both libraries skip an axis whose size does not change (its taps would be the identity).
  if (out_width_px != in.width_px) {
    out = resample_rows(out, out_width_px, axis_taps(in.width_px, out_width_px, rule));
  }
  if (out_height_px != in.height_px) {
    out = resample_columns(out, out_height_px, axis_taps(in.height_px, out_height_px, rule));
  }
  return out;
}

}  // namespace ib::detail
