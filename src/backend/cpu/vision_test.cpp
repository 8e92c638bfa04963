// The vision ops against naive references in double: LayerNorm, the two activations, residual
// adds, unmasked attention that stays within each image's tokens, and the per-row rotary
// embedding (q and k heads turned, v untouched), and the patch unfolding against the
// convolution's indexing.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/test_tensors.h"

namespace ib {
namespace {

using testing::random_floats;
using testing::TensorArena;

TEST(CpuVision, LayerNormMatchesDouble) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(3);
  const int64_t t = 5, d = 37;
  std::vector<float> x = random_floats(rng, t * d);
  for (float& v : x) v = v * 4.0f + 3.0f;  // an offset the mean must remove
  const auto w = random_floats(rng, d), b = random_floats(rng, d);
  Tensor out = arena.empty(DType::kF32, {t, d});
  backend.layer_norm(arena.f32({t, d}, x), arena.f32({d}, w), arena.f32({d}, b), 1e-5f, out);
  const auto got = arena.to_host(out);
  for (int64_t r = 0; r < t; ++r) {
    double mean = 0, var = 0;
    for (int64_t i = 0; i < d; ++i) mean += x[static_cast<size_t>(r * d + i)];
    mean /= static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i) var += std::pow(x[static_cast<size_t>(r * d + i)] - mean, 2);
    var /= static_cast<double>(d);
    for (int64_t i = 0; i < d; ++i) {
      const auto k = static_cast<size_t>(i);
      const double want =
          (x[static_cast<size_t>(r * d + i)] - mean) / std::sqrt(var + 1e-5) * w[k] + b[k];
      ASSERT_NEAR(got[static_cast<size_t>(r * d + i)], want, 2e-5) << r << " " << i;
    }
  }
}

TEST(CpuVision, ActivationsAndAdd) {
  CpuBackend backend(1);
  TensorArena arena(backend);
  const std::vector<float> x = {-3.0f, -0.5f, 0.0f, 0.25f, 2.0f};
  Tensor quick = arena.f32({5}, x), gelu = arena.f32({5}, x);
  backend.activation(quick, VisionActivation::kQuickGelu);
  backend.activation(gelu, VisionActivation::kGeluErf);
  const auto q = arena.to_host(quick), g = arena.to_host(gelu);
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    EXPECT_NEAR(q[i], v / (1 + std::exp(-1.702 * v)), 1e-6);
    EXPECT_NEAR(g[i], 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))), 1e-6);
  }
  Tensor sum = arena.f32({5}, x);
  backend.add(sum, arena.f32({5}, {1, 2, 3, 4, 5}));
  EXPECT_EQ(arena.to_host(sum), (std::vector<float>{-2.0f, 1.5f, 3.0f, 4.25f, 7.0f}));
}

TEST(CpuVision, BidirectionalAttentionStaysWithinEachImage) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(11);
  const int64_t images = 3, s = 7, h = 2, hd = 5, width = h * hd;
  const auto qkv = random_floats(rng, images * s * 3 * width);
  Tensor out = arena.empty(DType::kF32, {images * s, width});
  const float scale = 0.4f;
  backend.bidirectional_attention(arena.f32({images * s, 3 * width}, qkv), s, static_cast<int>(h),
                                  scale, out);
  const auto got = arena.to_host(out);
  auto at = [&](int64_t row, int64_t col) {
    return double{qkv[static_cast<size_t>(row * 3 * width + col)]};
  };
  for (int64_t row = 0; row < images * s; ++row) {
    const int64_t first = row / s * s;
    for (int64_t head = 0; head < h; ++head) {
      std::vector<double> p(static_cast<size_t>(s));
      double total = 0;
      for (int64_t j = 0; j < s; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < hd; ++i)
          dot += at(row, head * hd + i) * at(first + j, width + head * hd + i);
        total += p[static_cast<size_t>(j)] = std::exp(dot * scale);
      }
      for (int64_t i = 0; i < hd; ++i) {
        double want = 0;
        for (int64_t j = 0; j < s; ++j)
          want += p[static_cast<size_t>(j)] / total * at(first + j, 2 * width + head * hd + i);
        ASSERT_NEAR(got[static_cast<size_t>(row * width + head * hd + i)], want, 1e-5);
      }
    }
  }
}

TEST(CpuVision, RotaryRowsTurnsQAndKByEachRowsAngles) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(5);
  const int64_t t = 6, h = 3, hd = 8, half = hd / 2, width = h * hd;
  const auto qkv = random_floats(rng, t * 3 * width);
  std::vector<float> cos_v(static_cast<size_t>(t * half)), sin_v(cos_v.size());
  for (size_t i = 0; i < cos_v.size(); ++i) {
    const double angle = 0.37 * static_cast<double>(i) - 1.0;  // a distinct angle per (row, pair)
    cos_v[i] = static_cast<float>(std::cos(angle));
    sin_v[i] = static_cast<float>(std::sin(angle));
  }
  Tensor x = arena.f32({t, 3 * width}, qkv);
  backend.rotary_rows(x, arena.f32({t, half}, cos_v), arena.f32({t, half}, sin_v),
                      static_cast<int>(h));
  const auto got = arena.to_host(x);
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t col = 0; col < 3 * width; ++col) {
      const auto at = static_cast<size_t>(r * 3 * width + col);
      double want = qkv[at];  // v stays
      if (col < 2 * width) {
        const int64_t i = col % hd, pair = i % half;
        const auto a = static_cast<size_t>(r * 3 * width + col - i + pair);
        const double x1 = qkv[a], x2 = qkv[a + static_cast<size_t>(half)];
        const double c = cos_v[static_cast<size_t>(r * half + pair)];
        const double s = sin_v[static_cast<size_t>(r * half + pair)];
        want = i < half ? x1 * c - x2 * s : x2 * c + x1 * s;
      }
      ASSERT_NEAR(got[at], want, 1e-6) << r << " " << col;
    }
  }
}

// Each output element is the pixel the convolution's weight column (c, ky, kx) meets at its patch.
TEST(CpuVision, UnfoldPatchesPutsEachPatchInARow) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  const int64_t n = 2, s = 6, p = 3, grid = s / p;
  std::vector<float> pixels(static_cast<size_t>(n * 3 * s * s));
  for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = static_cast<float>(i);
  Tensor out = arena.empty(DType::kF32, {n * grid * grid, 3 * p * p});
  backend.unfold_patches(arena.f32({n * 3 * s, s}, pixels), p, out);
  const auto got = arena.to_host(out);
  for (int64_t img = 0; img < n; ++img) {
    for (int64_t gy = 0; gy < grid; ++gy) {
      for (int64_t gx = 0; gx < grid; ++gx) {
        for (int64_t c = 0; c < 3; ++c) {
          for (int64_t ky = 0; ky < p; ++ky) {
            for (int64_t kx = 0; kx < p; ++kx) {
              const int64_t row = (img * grid + gy) * grid + gx, col = (c * p + ky) * p + kx;
              const int64_t pixel = ((img * 3 + c) * s + gy * p + ky) * s + gx * p + kx;
              ASSERT_EQ(got[static_cast<size_t>(row * 3 * p * p + col)], static_cast<float>(pixel))
                  << row << " " << col;
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ib
