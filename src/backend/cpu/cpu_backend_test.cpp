// Element-wise ops, transfers, initialisation and memory of the CPU backend, against double loops.
#include "backend/cpu/cpu_backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/detail/test_tensors.h"

namespace ib {
namespace {

using testing::random_floats;
using testing::TensorArena;

double rms_ref(const float* x, int64_t d, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < d; ++i) ss += double{x[i]} * x[i];
  return 1.0 / std::sqrt(ss / static_cast<double>(d) + eps);
}

TEST(CpuBackend, RmsNormMatchesDouble) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(1);
  for (int64_t d : {1, 3, 8, 67, 512}) {
    const int64_t t = 5;
    const auto xv = random_floats(rng, t * d, -3, 3);
    const auto wv = random_floats(rng, d, 0.5, 1.5);
    Tensor out = arena.empty(DType::kF32, {t, d});
    backend.rms_norm(arena.f32({t, d}, xv), arena.f32({d}, wv), 1e-5f, out);
    const auto got = arena.to_host(out);
    for (int64_t r = 0; r < t; ++r) {
      const double inv = rms_ref(xv.data() + r * d, d, 1e-5);
      for (int64_t i = 0; i < d; ++i) {
        const double ref = xv[static_cast<size_t>(r * d + i)] * inv * wv[static_cast<size_t>(i)];
        EXPECT_NEAR(got[static_cast<size_t>(r * d + i)], ref, 1e-5 * (1 + std::fabs(ref)));
      }
    }
  }
}

TEST(CpuBackend, AddRmsNormUpdatesResidualInPlace) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(2);
  const int64_t t = 4, d = 96;
  const auto rv = random_floats(rng, t * d);
  const auto xv = random_floats(rng, t * d);
  const auto wv = random_floats(rng, d);
  Tensor residual = arena.f32({t, d}, rv);
  Tensor out = arena.empty(DType::kF32, {t, d});
  backend.add_rms_norm(residual, arena.f32({t, d}, xv), arena.f32({d}, wv), 1e-6f, out);
  const auto res = arena.to_host(residual);
  const auto got = arena.to_host(out);
  for (int64_t r = 0; r < t; ++r) {
    std::vector<float> sum(static_cast<size_t>(d));
    for (int64_t i = 0; i < d; ++i) {
      const auto k = static_cast<size_t>(r * d + i);
      sum[static_cast<size_t>(i)] = rv[k] + xv[k];
      EXPECT_EQ(res[k], rv[k] + xv[k]);
    }
    const double inv = rms_ref(sum.data(), d, 1e-6);
    for (int64_t i = 0; i < d; ++i) {
      const double ref = sum[static_cast<size_t>(i)] * inv * wv[static_cast<size_t>(i)];
      EXPECT_NEAR(got[static_cast<size_t>(r * d + i)], ref, 1e-5 * (1 + std::fabs(ref)));
    }
  }
}

TEST(CpuBackend, EmbeddingGatherAndSiluMul) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(3);
  const int64_t v = 11, d = 6;
  const auto table = random_floats(rng, v * d);
  const std::vector<int32_t> ids = {3, 0, 10, 3};
  Tensor emb = arena.empty(DType::kF32, {4, d});
  backend.embedding(arena.i32({4}, ids), arena.f32({v, d}, table), emb);
  const auto got = arena.to_host(emb);
  for (size_t t = 0; t < ids.size(); ++t) {
    for (int64_t i = 0; i < d; ++i) {
      EXPECT_EQ(got[t * d + static_cast<size_t>(i)], table[static_cast<size_t>(ids[t] * d + i)]);
    }
  }
  Tensor gathered = arena.empty(DType::kF32, {2, d});
  backend.gather_rows(emb, arena.i32({2}, {2, 1}), gathered);
  const auto g = arena.to_host(gathered);
  for (int64_t i = 0; i < d; ++i) {
    EXPECT_EQ(g[static_cast<size_t>(i)], table[static_cast<size_t>(10 * d + i)]);
    EXPECT_EQ(g[static_cast<size_t>(d + i)], table[static_cast<size_t>(i)]);
  }

  const int64_t t = 3, f = 37;
  const auto gu = random_floats(rng, t * 2 * f, -6, 6);
  Tensor act = arena.empty(DType::kF32, {t, f});
  backend.silu_mul(arena.f32({t, 2 * f}, gu), act);
  const auto a = arena.to_host(act);
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t i = 0; i < f; ++i) {
      const double gate = gu[static_cast<size_t>(r * 2 * f + i)];
      const double up = gu[static_cast<size_t>(r * 2 * f + f + i)];
      const double ref = gate / (1.0 + std::exp(-gate)) * up;
      EXPECT_NEAR(a[static_cast<size_t>(r * f + i)], ref, 1e-6 * (1 + std::fabs(ref)));
    }
  }
}

// GeGLU against PyTorch's tanh gelu in double; the affine map and the tanh soft-cap in place.
TEST(CpuBackend, GeluTanhMulAffineAndSoftcap) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(5);
  const int64_t t = 3, f = 41;
  const auto gu = random_floats(rng, t * 2 * f, -6, 6);
  Tensor act = arena.empty(DType::kF32, {t, f});
  backend.gelu_tanh_mul(arena.f32({t, 2 * f}, gu), act);
  const auto a = arena.to_host(act);
  const double k = std::sqrt(2.0 / M_PI);
  for (int64_t r = 0; r < t; ++r) {
    for (int64_t i = 0; i < f; ++i) {
      const double x = gu[static_cast<size_t>(r * 2 * f + i)];
      const double up = gu[static_cast<size_t>(r * 2 * f + f + i)];
      const double ref = 0.5 * x * (1.0 + std::tanh(k * (x + 0.044715 * x * x * x))) * up;
      EXPECT_NEAR(a[static_cast<size_t>(r * f + i)], ref, 2e-6 * (1 + std::fabs(ref)));
    }
  }
  const auto xv = random_floats(rng, 64, -100, 100);
  Tensor x = arena.f32({8, 8}, xv);
  backend.affine(x, 0.5f, 1.0f);
  const auto ax = arena.to_host(x);
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_FLOAT_EQ(ax[i], xv[i] * 0.5f + 1.0f);
  backend.softcap(x, 30.0f);
  const auto cx = arena.to_host(x);
  for (size_t i = 0; i < xv.size(); ++i) {
    const double ref = 30.0 * std::tanh((xv[i] * 0.5 + 1.0) / 30.0);
    EXPECT_NEAR(cx[i], ref, 1e-5);
    EXPECT_LT(std::fabs(cx[i]), 30.0f);
  }
}

TEST(CpuBackend, FillUniformFollowsTheCounterFormula) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Tensor t = arena.empty(DType::kF32, {300, 700});
  backend.fill_uniform(t, 42, 7, 0.25f);
  const auto got = arena.to_host(t);
  double lo = 1, hi = -1, mean = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const float u = counter_uniform(42, 7, i);
    ASSERT_EQ(got[i], 0.25f * (2.0f * u - 1.0f)) << i;
    lo = std::min<double>(lo, got[i]);
    hi = std::max<double>(hi, got[i]);
    mean += got[i];
  }
  mean /= static_cast<double>(got.size());
  EXPECT_LT(std::fabs(mean), 0.002);
  EXPECT_GE(lo, -0.25);
  EXPECT_LT(hi, 0.25);
  EXPECT_GT(hi - lo, 0.49);
  // A different stream gives different values.
  Tensor other = arena.empty(DType::kF32, {300, 700});
  backend.fill_uniform(other, 42, 8, 0.25f);
  EXPECT_NE(arena.to_host(other), got);

  Tensor c = arena.empty(DType::kF32, {5});
  backend.fill_constant(c, 1.5f);
  EXPECT_EQ(arena.to_host(c), std::vector<float>(5, 1.5f));
}

TEST(CpuBackend, CopyFromHostConvertsHalfPrecision) {
  CpuBackend backend(1);
  TensorArena arena(backend);
  const std::vector<float> values = {1.0f, -2.5f, 0.1f, 65504.0f, 3.140625f};
  std::vector<uint16_t> bf16, f16;
  for (float v : values) {
    bf16.push_back(f32_to_bf16_bits(v));
    f16.push_back(f32_to_f16_bits(v));
  }
  Tensor a = arena.empty(DType::kF32, {5});
  backend.copy_from_host(a, bf16.data(), DType::kBF16);
  Tensor b = arena.empty(DType::kF32, {5});
  backend.copy_from_host(b, f16.data(), DType::kF16);
  const auto ga = arena.to_host(a);
  const auto gb = arena.to_host(b);
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(ga[i], round_to_bf16(values[i]));
    EXPECT_EQ(gb[i], f16_bits_to_f32(f16[i]));
    EXPECT_NEAR(gb[i], values[i], 1e-3 * std::fabs(values[i]));
  }
}

TEST(CpuBackend, AllocationsAreTrackedAndCapped) {
  CpuBackend backend(1);
  EXPECT_GT(backend.device_info().total_bytes, 0);
  EXPECT_EQ(backend.device_info().kind, "cpu");
  backend.memory().set_limit_bytes(4096);
  {
    auto a = backend.alloc(1000, MemoryTag::kWeights);
    ASSERT_TRUE(a.ok());
    EXPECT_EQ(a->bytes(), 1024u);  // rounded to 256
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a->data()) % 256, 0u);
    EXPECT_EQ(backend.memory().snapshot().bytes_by_tag[0], 1024);
    auto b = backend.alloc(4000, MemoryTag::kKvCache);
    ASSERT_FALSE(b.ok());
    EXPECT_NE(b.error().message.find("memory limit"), std::string::npos);
  }
  const auto snap = backend.memory().snapshot();
  EXPECT_EQ(snap.allocated_bytes, 0);
  EXPECT_EQ(snap.peak_allocated_bytes, 1024);
  EXPECT_EQ(snap.num_refused, 1);
}

TEST(CpuBackend, CapRefusalIsTheAllocatorsMessage) {
  CpuBackend backend(1);
  backend.memory().set_limit_bytes(4096);
  auto refused = backend.alloc(5000, MemoryTag::kKvCache);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(Backend::alloc_bytes(5000), 5120u);
  EXPECT_EQ(backend.cap_refusal(Backend::alloc_bytes(5000), MemoryTag::kKvCache).message,
            refused.error().message);
  EXPECT_NE(refused.error().message.find("5120 bytes for kv_cache"), std::string::npos);
  EXPECT_NE(refused.error().message.find("limit of 4096 bytes"), std::string::npos);
}

TEST(CpuBackend, CopyOnDeviceCopiesEveryElement) {
  CpuBackend backend(1);
  // Two (3, 5) f32 tensors in one allocation, the second at a 256-byte offset.
  auto buf = backend.alloc(512, MemoryTag::kOther);
  ASSERT_TRUE(buf.ok());
  Tensor src = buf->view(DType::kF32, {3, 5});
  Tensor dst = buf->view(DType::kF32, {3, 5}, 256);
  std::vector<float> values(15);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.5f * static_cast<float>(i) - 3.0f;
  backend.copy_from_host(src, values.data(), DType::kF32);
  backend.fill_constant(dst, 7.0f);
  backend.copy_on_device(dst, src);
  std::vector<float> got(15);
  backend.copy_to_host(dst, got.data());
  EXPECT_EQ(got, values);
}

}  // namespace
}  // namespace ib
