// FP8 E4M3 weights on the CPU: quantization within the format's rounding bound, and the W8A8
// matmul against a double-precision loop written from backend/weight.h's definition.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/test_tensors.h"

namespace ib {
namespace {

using testing::random_floats;
using testing::TensorArena;

using HostFp8 = testing::HostQuantized<uint8_t>;

WeightRef fp8_weight(TensorArena& arena, int64_t n, int64_t k) {
  return arena.quantized_weight(WeightFormat::kFp8E4M3, n, k);
}

HostFp8 to_host(Backend& backend, const WeightRef& w) {
  return testing::quantized_to_host<uint8_t>(backend, w);
}

// The FP8 W8A8 definition's sum for out[i][j] in doubles: sum_l e4m3(x[i][l] * inv) * w[j][l]
// (codes decoded), and the sum of the terms' magnitudes (for a tolerance).
std::pair<double, double> fp8_dot(const std::vector<float>& xv, const HostFp8& h, int64_t i,
                                  int64_t j, int64_t k, float inv) {
  double acc = 0, magnitude = 0;
  for (int64_t l = 0; l < k; ++l) {
    const double xq =
        f8e4m3_bits_to_f32(f32_to_f8e4m3_bits(xv[static_cast<size_t>(i * k + l)] * inv));
    const double p = xq * f8e4m3_bits_to_f32(h.data[static_cast<size_t>(j * k + l)]);
    acc += p;
    magnitude += std::fabs(p);
  }
  return {acc, magnitude};
}

TEST(CpuFp8, QuantizesEachRowWithinHalfAStep) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(3);
  const int64_t n = 37, k = 300;
  auto values = random_floats(rng, n * k);
  for (int64_t i = 0; i < k; ++i) values[static_cast<size_t>(5 * k + i)] = 0.0f;    // a zero row
  for (int64_t i = 0; i < k; ++i) values[static_cast<size_t>(6 * k + i)] *= 1e-6f;  // tiny row
  const Tensor dense = arena.f32({n, k}, values);
  const WeightRef w = fp8_weight(arena, n, k);
  backend.quantize_weight(dense, w);
  const HostFp8 h = to_host(backend, w);
  for (int64_t r = 0; r < n; ++r) {
    double amax = 0;
    for (int64_t i = 0; i < k; ++i)
      amax = std::max(amax, std::fabs(double{values[static_cast<size_t>(r * k + i)]}));
    const float s = h.scales[static_cast<size_t>(r)];
    EXPECT_FLOAT_EQ(s, amax == 0 ? 1.0f : static_cast<float>(amax / 448.0)) << r;
    bool hit_max = false;
    for (int64_t i = 0; i < k; ++i) {
      const size_t at = static_cast<size_t>(r * k + i);
      const double v = values[at];
      const double deq = double{f8e4m3_bits_to_f32(h.data[at])} * s;
      // Half a step of E4M3: 2^-4 relative for normals, 2^-10 * s in the subnormal range.
      EXPECT_LE(std::fabs(deq - v),
                std::max(std::fabs(v) * 0.0625, std::ldexp(1.0, -10) * s) * 1.0001)
          << r << "," << i;
      hit_max = hit_max || (h.data[at] & 0x7f) == 0x7e;
    }
    EXPECT_EQ(hit_max, amax > 0) << "the largest element maps to +-448, row " << r;
  }
}

TEST(CpuFp8, MatmulMatchesTheFormatsDefinition) {
  CpuBackend backend(2);
  Rng rng(5);
  for (int trial = 0; trial < 12; ++trial) {
    TensorArena arena(backend);
    const int64_t m = rng.uniform_int(1, 20), n = rng.uniform_int(1, 70),
                  k = rng.uniform_int(1, 260);
    auto xv = random_floats(rng, m * k);
    if (trial == 0) std::fill(xv.begin(), xv.begin() + k, 0.0f);  // a zero activation row
    const auto wv = random_floats(rng, n * k);
    const auto bv = random_floats(rng, n);
    const Tensor x = arena.f32({m, k}, xv);
    const Tensor dense = arena.f32({n, k}, wv);
    const Tensor b = arena.f32({n}, bv);
    const WeightRef w = fp8_weight(arena, n, k);
    backend.quantize_weight(dense, w);
    const HostFp8 h = to_host(backend, w);
    Tensor out = arena.empty(DType::kF32, {m, n});
    const bool with_bias = trial % 2 == 1;
    backend.matmul(x, w, with_bias ? &b : nullptr, out);
    const auto got = arena.to_host(out);
    for (int64_t i = 0; i < m; ++i) {
      double amax = 0;
      for (int64_t l = 0; l < k; ++l)
        amax = std::max(amax, std::fabs(double{xv[static_cast<size_t>(i * k + l)]}));
      const float inv = amax == 0 ? 0.0f : 448.0f / static_cast<float>(amax);
      const double sx = amax == 0 ? 1.0 : double{static_cast<float>(amax) / 448.0f};
      for (int64_t j = 0; j < n; ++j) {
        const auto [acc, magnitude] = fp8_dot(xv, h, i, j, k, inv);
        const double scale = sx * h.scales[static_cast<size_t>(j)];
        const double ref = acc * scale + (with_bias ? bv[static_cast<size_t>(j)] : 0.0);
        const double tol = 1e-5 * (magnitude * scale + 1.0);
        EXPECT_NEAR(got[static_cast<size_t>(i * n + j)], ref, tol)
            << trial << ": " << i << "," << j;
      }
    }
  }
}

TEST(CpuFp8, MatmulStaysCloseToTheDenseResult) {
  // The accuracy W8A8 gives up on random data: a few percent relative L2 (E4M3 keeps 3 mantissa
  // bits, so each factor is within 6.25 % and the errors average out over k).
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(9);
  const int64_t m = 4, n = 64, k = 512;
  const auto xv = random_floats(rng, m * k);
  const auto wv = random_floats(rng, n * k);
  const Tensor x = arena.f32({m, k}, xv);
  const Tensor dense = arena.f32({n, k}, wv);
  const WeightRef w = fp8_weight(arena, n, k);
  backend.quantize_weight(dense, w);
  Tensor out_q = arena.empty(DType::kF32, {m, n});
  Tensor out_d = arena.empty(DType::kF32, {m, n});
  backend.matmul(x, w, nullptr, out_q);
  backend.matmul(x, dense, nullptr, out_d);
  const auto q = arena.to_host(out_q), d = arena.to_host(out_d);
  double err = 0, norm = 0;
  for (size_t i = 0; i < q.size(); ++i) {
    err += (q[i] - d[i]) * (q[i] - d[i]);
    norm += d[i] * d[i];
  }
  const double rel = std::sqrt(err / norm);
  EXPECT_GT(rel, 1e-4) << "fp8 should not be exact";
  EXPECT_LT(rel, 0.05);
}

// A static input scale (a checkpoint's input_scale, backend/weight.h): every token quantized with
// the same scale, e4m3(x * (1 / s)) saturating at +-448, against a double loop.
TEST(CpuFp8, StaticInputScaleMatchesTheFormatsDefinition) {
  CpuBackend backend(2);
  Rng rng(15);
  TensorArena arena(backend);
  const int64_t m = 6, n = 29, k = 130;
  auto xv = random_floats(rng, m * k, -3.0f, 3.0f);
  xv[3] = 40.0f;  // beyond 448 * s below: saturates
  const auto wv = random_floats(rng, n * k);
  const Tensor x = arena.f32({m, k}, xv);
  WeightRef w = fp8_weight(arena, n, k);
  backend.quantize_weight(arena.f32({n, k}, wv), w);
  const HostFp8 h = to_host(backend, w);
  w.input_scale = 0.05f;
  const float inv = 1.0f / w.input_scale;
  Tensor out = arena.empty(DType::kF32, {m, n});
  backend.matmul(x, w, nullptr, out);
  const auto got = arena.to_host(out);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const auto [acc, magnitude] = fp8_dot(xv, h, i, j, k, inv);
      const double scale = double{w.input_scale} * h.scales[static_cast<size_t>(j)];
      EXPECT_NEAR(got[static_cast<size_t>(i * n + j)], acc * scale, 1e-5 * (magnitude * scale + 1))
          << i << "," << j;
    }
  }
  EXPECT_EQ(f32_to_f8e4m3_bits(40.0f * inv), 0x7e) << "the test's saturating value";
}

}  // namespace
}  // namespace ib
