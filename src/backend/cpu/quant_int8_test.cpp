// INT8 weights on the CPU (W8A16 and W8A8): quantization within half a step of the scale, and
// both matmuls against double-precision loops written from backend/weight.h's definitions.
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

WeightRef int8_weight(TensorArena& arena, WeightFormat format, int64_t n, int64_t k) {
  return arena.quantized_weight(format, n, k);
}

using HostInt8 = testing::HostQuantized<int8_t>;

HostInt8 to_host(Backend& backend, const WeightRef& w) {
  return testing::quantized_to_host<int8_t>(backend, w);
}

double row_amax(const std::vector<float>& v, int64_t row, int64_t k) {
  double amax = 0;
  for (int64_t i = 0; i < k; ++i)
    amax = std::max(amax, std::fabs(double{v[static_cast<size_t>(row * k + i)]}));
  return amax;
}

TEST(CpuInt8, QuantizesEachRowWithinHalfAStep) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(4);
  const int64_t n = 29, k = 257;
  auto values = random_floats(rng, n * k);
  for (int64_t i = 0; i < k; ++i) values[static_cast<size_t>(3 * k + i)] = 0.0f;  // a zero row
  const Tensor dense = arena.f32({n, k}, values);
  const WeightRef w = int8_weight(arena, WeightFormat::kInt8W8A16, n, k);
  backend.quantize_weight(dense, w);
  const HostInt8 h = to_host(backend, w);
  for (int64_t r = 0; r < n; ++r) {
    const double amax = row_amax(values, r, k);
    const float s = h.scales[static_cast<size_t>(r)];
    EXPECT_FLOAT_EQ(s, amax == 0 ? 1.0f : static_cast<float>(amax / 127.0)) << r;
    int max_code = 0;
    for (int64_t i = 0; i < k; ++i) {
      const size_t at = static_cast<size_t>(r * k + i);
      const int code = h.data[at];
      EXPECT_GE(code, -127) << "int8 symmetric never uses -128";
      EXPECT_LE(std::fabs(code * double{s} - values[at]), 0.5 * s * 1.0001) << r << "," << i;
      max_code = std::max(max_code, std::abs(code));
    }
    EXPECT_EQ(max_code, amax > 0 ? 127 : 0) << "the largest element maps to +-127, row " << r;
  }
}

TEST(CpuInt8, RoundsHalfwayCodesToEven) {
  CpuBackend backend(1);
  TensorArena arena(backend);
  // amax 127 gives inv 1: 2.5 -> 2, 3.5 -> 4, -0.5 -> -0 (0), 126.5 -> 126.
  const std::vector<float> row = {127.0f, 2.5f, 3.5f, -0.5f, 126.5f, -127.0f, 0.0f, 1.5f};
  const Tensor dense = arena.f32({1, 8}, row);
  const WeightRef w = int8_weight(arena, WeightFormat::kInt8W8A16, 1, 8);
  backend.quantize_weight(dense, w);
  const HostInt8 h = to_host(backend, w);
  EXPECT_EQ(h.data, (std::vector<int8_t>{127, 2, 4, 0, 126, -127, 0, 2}));
  EXPECT_FLOAT_EQ(h.scales[0], 1.0f);
}

// The reference of both INT8 formats for one random case, in double precision.
void check_matmul(WeightFormat format, int trial, Rng& rng, CpuBackend& backend) {
  TensorArena arena(backend);
  const int64_t m = rng.uniform_int(1, 20), n = rng.uniform_int(1, 70), k = rng.uniform_int(1, 260);
  auto xv = random_floats(rng, m * k);
  if (trial == 0) std::fill(xv.begin(), xv.begin() + k, 0.0f);  // a zero activation row
  const auto wv = random_floats(rng, n * k);
  const auto bv = random_floats(rng, n);
  const Tensor x = arena.f32({m, k}, xv);
  const Tensor b = arena.f32({n}, bv);
  const WeightRef w = int8_weight(arena, format, n, k);
  backend.quantize_weight(arena.f32({n, k}, wv), w);
  const HostInt8 h = to_host(backend, w);
  Tensor out = arena.empty(DType::kF32, {m, n});
  const bool with_bias = trial % 2 == 1;
  backend.matmul(x, w, with_bias ? &b : nullptr, out);
  const auto got = arena.to_host(out);
  const bool a8 = format == WeightFormat::kInt8W8A8;
  for (int64_t i = 0; i < m; ++i) {
    const double amax = row_amax(xv, i, k);
    const float inv = amax == 0 ? 0.0f : 127.0f / static_cast<float>(amax);
    const double sx = !a8 ? 1.0 : amax == 0 ? 1.0 : double{static_cast<float>(amax) / 127.0f};
    for (int64_t j = 0; j < n; ++j) {
      double acc = 0, magnitude = 0;
      for (int64_t l = 0; l < k; ++l) {
        const float v = xv[static_cast<size_t>(i * k + l)];
        const double xq = a8 ? std::clamp(std::nearbyint(double{v * inv}), -127.0, 127.0) : v;
        const double p = xq * h.data[static_cast<size_t>(j * k + l)];
        acc += p;
        magnitude += std::fabs(p);
      }
      const double scale = sx * h.scales[static_cast<size_t>(j)];
      const double ref = acc * scale + (with_bias ? bv[static_cast<size_t>(j)] : 0.0);
      // W8A8 sums integers exactly; W8A16 sums fp32 products.
      const double tol = (a8 ? 1e-6 : 1e-5) * (magnitude * scale + 1.0);
      EXPECT_NEAR(got[static_cast<size_t>(i * n + j)], ref, tol)
          << weight_format_name(format) << " " << trial << ": " << i << "," << j;
    }
  }
}

TEST(CpuInt8, MatmulsMatchTheFormatsDefinitions) {
  CpuBackend backend(2);
  Rng rng(6);
  for (int trial = 0; trial < 10; ++trial) {
    check_matmul(WeightFormat::kInt8W8A16, trial, rng, backend);
    check_matmul(WeightFormat::kInt8W8A8, trial, rng, backend);
  }
}

TEST(CpuInt8, MatmulsStayCloseToTheDenseResult) {
  // int8 keeps 7 bits per value: well under 1 % relative L2 on random data, W8A8 worse than
  // W8A16 (its activations are rounded too), both above fp32 noise.
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(10);
  const int64_t m = 4, n = 64, k = 512;
  const Tensor x = arena.f32({m, k}, random_floats(rng, m * k));
  const Tensor dense = arena.f32({n, k}, random_floats(rng, n * k));
  Tensor out_d = arena.empty(DType::kF32, {m, n});
  backend.matmul(x, dense, nullptr, out_d);
  const auto d = arena.to_host(out_d);
  double rel[2] = {0, 0};
  const WeightFormat formats[2] = {WeightFormat::kInt8W8A16, WeightFormat::kInt8W8A8};
  for (int f = 0; f < 2; ++f) {
    const WeightRef w = int8_weight(arena, formats[f], n, k);
    backend.quantize_weight(dense, w);
    Tensor out_q = arena.empty(DType::kF32, {m, n});
    backend.matmul(x, w, nullptr, out_q);
    const auto q = arena.to_host(out_q);
    double err = 0, norm = 0;
    for (size_t i = 0; i < q.size(); ++i) {
      err += (q[i] - d[i]) * (q[i] - d[i]);
      norm += d[i] * d[i];
    }
    rel[f] = std::sqrt(err / norm);
    EXPECT_GT(rel[f], 1e-4) << weight_format_name(formats[f]) << " should not be exact";
    EXPECT_LT(rel[f], 0.02) << weight_format_name(formats[f]);
  }
  EXPECT_LT(rel[0], rel[1]) << "W8A16 keeps the activations exact";
}

// Static activation scales (backend/weight.h): the symmetric and the seed's asymmetric scheme
// against double loops written from the definition, values beyond the range saturating.
TEST(CpuInt8, StaticActivationScalesMatchTheDefinition) {
  CpuBackend backend(2);
  Rng rng(12);
  TensorArena arena(backend);
  const int64_t m = 5, n = 33, k = 200;
  auto xv = random_floats(rng, m * k, -1.0f, 2.0f);
  xv[7] = 9.0f;  // beyond both ranges below: saturates
  xv[8] = -9.0f;
  const Tensor x = arena.f32({m, k}, xv);
  const auto bv = random_floats(rng, n);
  const Tensor b = arena.f32({n}, bv);
  WeightRef w = int8_weight(arena, WeightFormat::kInt8W8A8, n, k);
  backend.quantize_weight(arena.f32({n, k}, random_floats(rng, n * k)), w);
  const HostInt8 h = to_host(backend, w);
  struct Case {
    float scale;
    int32_t zero;
    bool asymmetric;
  };
  for (const Case c : {Case{2.0f / 127.0f, 0, false}, Case{3.0f / 255.0f, 85, true}}) {
    w.input_scale = c.scale;
    w.input_zero_point = c.zero;
    w.input_asymmetric = c.asymmetric;
    const float inv = 1.0f / c.scale;  // weight.h: x * (1 / s) in fp32
    Tensor out = arena.empty(DType::kF32, {m, n});
    backend.matmul(x, w, &b, out);
    const auto got = arena.to_host(out);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, magnitude = 0;
        for (int64_t l = 0; l < k; ++l) {
          const double v = std::nearbyint(double{xv[static_cast<size_t>(i * k + l)] * inv});
          const double code = c.asymmetric ? std::clamp(v + c.zero, 0.0, 255.0) - c.zero
                                           : std::clamp(v, -127.0, 127.0);
          const double p = code * h.data[static_cast<size_t>(j * k + l)];
          acc += p;
          magnitude += std::fabs(p);
        }
        const double scale = double{c.scale} * h.scales[static_cast<size_t>(j)];
        const double ref = acc * scale + bv[static_cast<size_t>(j)];
        EXPECT_NEAR(got[static_cast<size_t>(i * n + j)], ref, 1e-6 * (magnitude * scale + 1.0))
            << (c.asymmetric ? "asymmetric " : "symmetric ") << i << "," << j;
      }
    }
  }
}

}  // namespace
}  // namespace ib
