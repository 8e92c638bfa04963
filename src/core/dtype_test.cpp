// The FP8 E4M3 codec against the format's definition: every code decoded by its fields, and
// encoding checked against a brute-force nearest-value search over all finite codes.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace ib {
namespace {

// The value of a code from the OFP8 definition, written independently of dtype.cpp.
double e4m3_by_definition(int code) {
  const int s = code >> 7, e = (code >> 3) & 15, m = code & 7;
  const double mag = e == 0 ? m / 8.0 * std::pow(2.0, -6) : (1 + m / 8.0) * std::pow(2.0, e - 7);
  return s ? -mag : mag;
}

// Nearest finite code to f (ties: the even code), saturating at +-448.
uint8_t nearest_code(float f) {
  int best = -1;
  double best_err = 0;
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;  // NaN
    if (std::signbit(f) != ((c & 0x80) != 0)) continue;
    const double err = std::fabs(e4m3_by_definition(c) - static_cast<double>(f));
    if (best < 0 || err < best_err || (err == best_err && (c & 1) == 0)) {
      best = c;
      best_err = err;
    }
  }
  return static_cast<uint8_t>(best);
}

TEST(Fp8E4M3, DecodesEveryCodeByItsFields) {
  for (int c = 0; c < 256; ++c) {
    const float v = f8e4m3_bits_to_f32(static_cast<uint8_t>(c));
    if ((c & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(v)) << c;
    } else {
      EXPECT_EQ(static_cast<double>(v), e4m3_by_definition(c)) << c;
    }
  }
  EXPECT_EQ(f8e4m3_bits_to_f32(0x7e), kF8E4M3Max);
  EXPECT_EQ(f8e4m3_bits_to_f32(0x38), 1.0f);
  EXPECT_EQ(f8e4m3_bits_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8E4M3, EncodesFiniteCodesExactly) {
  for (int c = 0; c < 256; ++c) {
    if ((c & 0x7f) == 0x7f) continue;
    EXPECT_EQ(f32_to_f8e4m3_bits(f8e4m3_bits_to_f32(static_cast<uint8_t>(c))), c) << c;
  }
}

TEST(Fp8E4M3, RoundsToNearestEvenAndSaturates) {
  EXPECT_EQ(f32_to_f8e4m3_bits(std::ldexp(1.0f, -10)), 0x00);      // tie 0 / 2^-9 -> even 0
  EXPECT_EQ(f32_to_f8e4m3_bits(3 * std::ldexp(1.0f, -10)), 0x02);  // tie codes 1 / 2 -> 2
  EXPECT_EQ(f32_to_f8e4m3_bits(1.0625f), 0x38);                    // tie 1 / 1.125 -> 1
  EXPECT_EQ(f32_to_f8e4m3_bits(1.1875f), 0x3a);                    // tie 1.125 / 1.25 -> 1.25
  EXPECT_EQ(f32_to_f8e4m3_bits(464.0f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3_bits(1e9f), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3_bits(-1e9f), 0xfe);
  EXPECT_EQ(f32_to_f8e4m3_bits(INFINITY), 0x7e);
  EXPECT_EQ(f32_to_f8e4m3_bits(-0.0f), 0x80);
  EXPECT_EQ(f32_to_f8e4m3_bits(NAN), 0x7f);
}

TEST(Fp8E4M3, MatchesNearestValueSearch) {
  std::mt19937 rng(7);
  std::vector<float> values;
  std::uniform_real_distribution<float> exp(-14.0f, 10.0f);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int i = 0; i < 20000; ++i) values.push_back(unit(rng) * std::exp2(exp(rng)));
  // Every midpoint between neighbouring codes, and a hair either side of it.
  for (int c = 0; c < 0x7e; ++c) {
    const float lo = f8e4m3_bits_to_f32(static_cast<uint8_t>(c));
    const float hi = f8e4m3_bits_to_f32(static_cast<uint8_t>(c + 1));
    const float mid = (lo + hi) / 2;
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f)}) {
      values.push_back(v);
      values.push_back(-v);
    }
  }
  for (float v : values) EXPECT_EQ(f32_to_f8e4m3_bits(v), nearest_code(v)) << v;
}

}  // namespace
}  // namespace ib
