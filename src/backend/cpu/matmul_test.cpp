// matmul against a double-precision loop on random shapes; tiling never changes a row's result.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/dot.h"
#include "backend/cpu/detail/test_tensors.h"

namespace ib {
namespace {

using testing::random_floats;
using testing::TensorArena;

TEST(CpuMatmul, MatchesDoubleReferenceOnRandomShapes) {
  CpuBackend backend(2);
  Rng rng(11);
  for (int trial = 0; trial < 40; ++trial) {
    TensorArena arena(backend);
    const int64_t m = rng.uniform_int(1, 37);
    const int64_t n = rng.uniform_int(1, 140);
    const int64_t k = rng.uniform_int(1, 300);
    const bool with_bias = trial % 2 == 0;
    const auto xv = random_floats(rng, m * k);
    const auto wv = random_floats(rng, n * k);
    const auto bv = random_floats(rng, n);
    Tensor x = arena.f32({m, k}, xv);
    Tensor w = arena.f32({n, k}, wv);
    Tensor b = arena.f32({n}, bv);
    Tensor out = arena.empty(DType::kF32, {m, n});
    backend.matmul(x, w, with_bias ? &b : nullptr, out);
    const auto got = arena.to_host(out);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double ref = with_bias ? bv[static_cast<size_t>(j)] : 0.0;
        double magnitude = std::fabs(ref);
        for (int64_t l = 0; l < k; ++l) {
          const double p =
              double{xv[static_cast<size_t>(i * k + l)]} * wv[static_cast<size_t>(j * k + l)];
          ref += p;
          magnitude += std::fabs(p);
        }
        ASSERT_NEAR(got[static_cast<size_t>(i * n + j)], ref, 2e-6 * magnitude + 1e-7)
            << "m=" << m << " n=" << n << " k=" << k << " at (" << i << "," << j << ")";
      }
    }
  }
}

TEST(CpuMatmul, EachEntryIsExactlyTheSharedDotProduct) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(5);
  const int64_t m = 7, n = 23, k = 131;
  const auto xv = random_floats(rng, m * k);
  const auto wv = random_floats(rng, n * k);
  Tensor x = arena.f32({m, k}, xv);
  Tensor w = arena.f32({n, k}, wv);
  Tensor out = arena.empty(DType::kF32, {m, n});
  backend.matmul(x, w, nullptr, out);
  const auto batched = arena.to_host(out);
  for (int64_t i = 0; i < m; ++i) {
    // The same row alone (m = 1) must give bit-identical results: batching never changes logits.
    Tensor row_out = arena.empty(DType::kF32, {1, n});
    backend.matmul(x.slice_rows(i, 1), w, nullptr, row_out);
    const auto single = arena.to_host(row_out);
    for (int64_t j = 0; j < n; ++j) {
      const float dot = cpu::dot_f32(xv.data() + i * k, wv.data() + j * k, k);
      EXPECT_EQ(batched[static_cast<size_t>(i * n + j)], dot);
      EXPECT_EQ(single[static_cast<size_t>(j)], dot);
    }
  }
}

TEST(CpuMatmul, LargeShapeAcrossCacheBlocksIsExact) {
  // Big enough for several cache blocks per thread; spot-check against the reference.
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(3);
  const int64_t m = 9, n = 1030, k = 600;
  const auto xv = random_floats(rng, m * k);
  const auto wv = random_floats(rng, n * k);
  Tensor out = arena.empty(DType::kF32, {m, n});
  backend.matmul(arena.f32({m, k}, xv), arena.f32({n, k}, wv), nullptr, out);
  const auto got = arena.to_host(out);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_EQ(got[static_cast<size_t>(i * n + j)],
                cpu::dot_f32(xv.data() + i * k, wv.data() + j * k, k));
    }
  }
}

}  // namespace
}  // namespace ib
