// 4-bit weights on the CPU (kInt4W4A16, kNf4): hand-computed codes and nibble order per format,
// round-trip error bounds, and the matmul (act-order included) against a double loop written
// from backend/weight.h's definitions.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/test_tensors.h"

namespace ib {
namespace {

using testing::random_floats;
using testing::TensorArena;

struct Host4bit {
  std::vector<uint8_t> data;   // (N, K / 2)
  std::vector<float> scales;   // (N, K / G), f16 decoded
  std::vector<uint8_t> zeros;  // (N, K / G); empty for nf4
  int64_t k = 0;
  int64_t g = 0;
  bool nf4 = false;
  int code(int64_t n, int64_t i) const {
    const uint8_t b = data[static_cast<size_t>(n * (k / 2) + i / 2)];
    const bool high = (i % 2 == 0) == nf4;  // nf4: k = 2j high; int4: k = 2j low
    return high ? b >> 4 : b & 0x0F;
  }
  // weight.h's w[n][k], in double.
  double value(int64_t n, int64_t i) const {
    const size_t gi = static_cast<size_t>(n * (k / g) + i / g);
    if (nf4) return double{kNf4Levels[code(n, i)]} * scales[gi];
    return (code(n, i) - int{zeros[gi]}) * double{scales[gi]};
  }
};

Host4bit to_host(Backend& backend, const WeightRef& w) {
  Host4bit h;
  h.k = w.cols();
  h.g = w.group_size;
  h.nf4 = w.format == WeightFormat::kNf4;
  h.data.resize(static_cast<size_t>(w.data.numel()));
  backend.copy_to_host(w.data, h.data.data());
  h.scales.resize(static_cast<size_t>(w.scales.numel()));
  if (h.nf4) {
    backend.copy_to_host(w.scales, h.scales.data());
  } else {
    std::vector<uint16_t> bits(h.scales.size());
    backend.copy_to_host(w.scales, bits.data());
    for (size_t i = 0; i < bits.size(); ++i) h.scales[i] = f16_bits_to_f32(bits[i]);
    h.zeros.resize(h.scales.size());
    backend.copy_to_host(w.zeros, h.zeros.data());
  }
  return h;
}

TEST(CpuInt4, AwqQuantizesAGroupAsHandComputed) {
  CpuBackend backend(1);
  TensorArena arena(backend);
  // min -0.75, max 3: s = 3.75 / 15 = 0.25 (exact in f16), z = rne(0.75 / 0.25) = 3.
  std::vector<float> w(16, 0.0f);
  w[0] = -0.75f;   // q = -3 + 3 = 0
  w[1] = 3.0f;     // q = 12 + 3 = 15
  w[2] = 1.0f;     // q = 4 + 3 = 7
  w[3] = 0.375f;   // 1.5 rounds to even 2: q = 5
  w[4] = 0.125f;   // 0.5 rounds to even 0: q = 3
  w[5] = -0.625f;  // -2.5 rounds to even -2: q = 1
  const WeightRef q = arena.four_bit_weight(WeightFormat::kInt4W4A16, 1, 16, 16, true);
  backend.quantize_weight(arena.f32({1, 16}, w), q);
  const Host4bit h = to_host(backend, q);
  EXPECT_EQ(h.scales[0], 0.25f);
  EXPECT_EQ(h.zeros[0], 3);
  // k = 2j in the low nibble of byte j.
  EXPECT_EQ(h.data[0], 0xF0);  // k0 = 0, k1 = 15
  EXPECT_EQ(h.data[1], 0x57);  // k2 = 7, k3 = 5
  EXPECT_EQ(h.data[2], 0x13);  // k4 = 3, k5 = 1
  EXPECT_EQ(h.data[3], 0x33);  // zeros: q = z
}

TEST(CpuInt4, GptqQuantizesAGroupSymmetricallyAsHandComputed) {
  CpuBackend backend(1);
  TensorArena arena(backend);
  // max |w| 3.75: s = 0.5, z = 8. Second group all zero: s = 1.
  std::vector<float> w(32, 0.0f);
  w[0] = -3.75f;  // -7.5 rounds to even -8: q = 0
  w[1] = 3.75f;   // 7.5 rounds to 8, clamped: q = 15
  w[2] = 0.25f;   // 0.5 rounds to 0: q = 8
  w[3] = 0.75f;   // 1.5 rounds to 2: q = 10
  const WeightRef q = arena.four_bit_weight(WeightFormat::kInt4W4A16, 1, 32, 16, false);
  backend.quantize_weight(arena.f32({1, 32}, w), q);
  const Host4bit h = to_host(backend, q);
  EXPECT_EQ(h.scales[0], 0.5f);
  EXPECT_EQ(h.scales[1], 1.0f);
  EXPECT_EQ(h.zeros[0], 8);
  EXPECT_EQ(h.zeros[1], 8);
  EXPECT_EQ(h.data[0], 0xF0);
  EXPECT_EQ(h.data[1], 0xA8);
  EXPECT_EQ(h.data[8], 0x88);
}

TEST(CpuNf4, QuantizesABlockAsHandComputed) {
  CpuBackend backend(1);
  TensorArena arena(backend);
  std::vector<float> w(128, 0.0f);  // block 1 all zero: absmax 1
  w[0] = 2.0f;                      // absmax 2: level 1.0, code 15
  w[1] = -2.0f;                     // code 0
  w[2] = 0.16093020141124725f;      // 0.0805 is nearest 0.0796: code 8
  w[3] = -0.4f;                     // -0.2 is nearest -0.1848: code 5
  const WeightRef q = arena.four_bit_weight(WeightFormat::kNf4, 1, 128, 64);
  backend.quantize_weight(arena.f32({1, 128}, w), q);
  const Host4bit h = to_host(backend, q);
  EXPECT_EQ(h.scales[0], 2.0f);
  EXPECT_EQ(h.scales[1], 1.0f);
  EXPECT_EQ(h.data[0], 0xF0);  // k = 2j in the HIGH nibble
  EXPECT_EQ(h.data[1], 0x85);
  EXPECT_EQ(h.data[2], 0x77);  // zero: code 7
  EXPECT_EQ(h.data[32], 0x77);
}

TEST(CpuInt4, RoundTripIsWithinHalfAStep) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(14);
  const int64_t n = 9, k = 256;
  for (const bool asymmetric : {true, false}) {
    auto values = random_floats(rng, n * k, -0.3f, 0.7f);
    const WeightRef q = arena.four_bit_weight(WeightFormat::kInt4W4A16, n, k, 128, asymmetric);
    backend.quantize_weight(arena.f32({n, k}, values), q);
    const Host4bit h = to_host(backend, q);
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t i = 0; i < k; ++i) {
        const size_t gi = static_cast<size_t>(r * (k / 128) + i / 128);
        const double s = h.scales[gi];
        const double w = values[static_cast<size_t>(r * k + i)];
        const double t = w / s + h.zeros[gi];
        if (t < -0.5 || t > 15.5) continue;  // outside the clamp range (gptq's +max only)
        EXPECT_LE(std::fabs(h.value(r, i) - w), 0.5 * s * 1.0001) << asymmetric << r << "," << i;
      }
    }
  }
}

TEST(CpuNf4, RoundTripPicksTheNearestLevel) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(15);
  const int64_t n = 5, k = 192;
  const auto values = random_floats(rng, n * k);
  const WeightRef q = arena.four_bit_weight(WeightFormat::kNf4, n, k, 64);
  backend.quantize_weight(arena.f32({n, k}, values), q);
  const Host4bit h = to_host(backend, q);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const double absmax = h.scales[static_cast<size_t>(r * 3 + i / 64)];
      const double x = values[static_cast<size_t>(r * k + i)] / absmax;
      const double err = std::fabs(x - kNf4Levels[h.code(r, i)]);
      for (const float level : kNf4Levels) EXPECT_LE(err, std::fabs(x - level) + 1e-6);
    }
  }
}

// y against weight.h's definition in double: x permuted by input_perm, the dequantized rows.
void expect_matmul_matches_definition(WeightFormat format, bool asymmetric, bool act_order) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(16);
  const int64_t m = 3, n = 21, k = 128;
  const int g = format == WeightFormat::kNf4 ? 64 : 32;
  const auto values = random_floats(rng, n * k);
  WeightRef w = arena.four_bit_weight(format, n, k, g, asymmetric);
  backend.quantize_weight(arena.f32({n, k}, values), w);
  std::vector<int32_t> perm(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) perm[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  if (act_order) {
    std::reverse(perm.begin(), perm.end());
    std::swap(perm[3], perm[40]);
    w.input_perm = arena.i32({k}, perm);
  }
  const auto x = random_floats(rng, m * k);
  const auto bias = random_floats(rng, n);
  Tensor out = arena.empty(DType::kF32, {m, n});
  const Tensor bias_t = arena.f32({n}, bias);
  backend.matmul(arena.f32({m, k}, x), w, &bias_t, out);
  const auto y = arena.to_host(out);
  const Host4bit h = to_host(backend, w);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      double ref = bias[static_cast<size_t>(j)];
      for (int64_t i = 0; i < k; ++i)
        ref += double{x[static_cast<size_t>(r * k + perm[static_cast<size_t>(i)])]} * h.value(j, i);
      EXPECT_NEAR(y[static_cast<size_t>(r * n + j)], ref, 1e-4) << r << "," << j;
    }
  }
}

TEST(CpuInt4, AwqMatmulMatchesTheDefinition) {
  expect_matmul_matches_definition(WeightFormat::kInt4W4A16, true, false);
}
TEST(CpuInt4, GptqActOrderMatmulMatchesTheDefinition) {
  expect_matmul_matches_definition(WeightFormat::kInt4W4A16, false, true);
}
TEST(CpuNf4, MatmulMatchesTheDefinition) {
  expect_matmul_matches_definition(WeightFormat::kNf4, false, false);
}

TEST(CpuInt4, MatmulReadsZerosScalesAndPermutationAsHandComputed) {
  CpuBackend backend(1);
  TensorArena arena(backend);
  // One row, K = 32, G = 16: group 0 codes 9 (z 8, s 0.5: w = 0.5), group 1 codes 2 (z 4, s 2:
  // w = -4), except k = 17 (high nibble of byte 8) code 7: w = 6.
  WeightRef w = arena.four_bit_weight(WeightFormat::kInt4W4A16, 1, 32, 16);
  std::vector<uint8_t> data(16, 0x99);
  for (size_t j = 8; j < 16; ++j) data[j] = 0x22;
  data[8] = 0x72;
  backend.copy_from_host(w.data, data.data(), DType::kU8);
  const uint16_t scales[2] = {f32_to_f16_bits(0.5f), f32_to_f16_bits(2.0f)};
  backend.copy_from_host(w.scales, scales, DType::kF16);
  const uint8_t zeros[2] = {8, 4};
  backend.copy_from_host(w.zeros, zeros, DType::kU8);
  std::vector<int32_t> perm(32);
  for (int32_t i = 0; i < 32; ++i) perm[static_cast<size_t>(i)] = (i + 16) % 32;  // halves swap
  w.input_perm = arena.i32({32}, perm);
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;   // feeds column 16: w = -4
  x[1] = 10.0f;  // feeds column 17: w = 6
  x[16] = 3.0f;  // feeds column 0: w = 0.5
  Tensor out = arena.empty(DType::kF32, {1, 1});
  backend.matmul(arena.f32({1, 32}, x), w, nullptr, out);
  EXPECT_FLOAT_EQ(arena.to_host(out)[0], -4.0f + 60.0f + 1.5f);
}

}  // namespace
}  // namespace ib
