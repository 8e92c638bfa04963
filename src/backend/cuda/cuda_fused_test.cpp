// Differential tests of the fused decode ops (rms_matmul_rope_cache, rms_matmul_swiglu,
// matmul_add, scale_columns) against the unfused CPU ops they replace: rms_norm with a unit
// gain, matmul (+ bias), rope_and_cache, silu_mul, and a residual add on the host. bf16 and fp16
// (the fused ops exist only for half types; fp32 steps run unfused).
#include <gtest/gtest.h>

#include <cmath>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;

class CudaFused : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

struct Shape {
  int64_t m, n, k;
};
// Token counts 1..8 (the fused range), K of real models and a small one, N not a multiple of 16.
const Shape kShapes[] = {{1, 6144, 4096}, {3, 1000, 256}, {8, 4096, 4096},
                         {5, 72, 128},    {8, 1152, 896}, {2, 3, 64}};

// The rows of h get different scales so that a wrong per-token 1/rms shows.
std::vector<float> scaled_rows(Rng& rng, int64_t m, int64_t k) {
  std::vector<float> v = random_floats(rng, m * k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < k; ++j) v[static_cast<size_t>(i * k + j)] *= 0.25f + float(i);
  return v;
}

TEST_P(CudaFused, ExistsForHalfTypesUpToEightTokens) {
  Twin twin(GetParam());
  EXPECT_TRUE(twin.gpu().fused_decode(0));
  EXPECT_TRUE(twin.gpu().fused_decode(8));
  EXPECT_FALSE(twin.gpu().fused_decode(9));
  AttentionShape llama3;
  llama3.num_heads = 32;
  llama3.num_kv_heads = 8;
  llama3.head_dim = 128;
  EXPECT_TRUE(twin.gpu().fused_decode_fits(llama3, 4096, 14336));
  EXPECT_FALSE(twin.gpu().fused_decode_fits(llama3, 4096 + 32, 14336));  // K not a multiple of 64
  AttentionShape odd_heads = llama3;
  odd_heads.head_dim = 72;  // not a whole number of 16-row tiles
  EXPECT_FALSE(twin.gpu().fused_decode_fits(odd_heads, 4096, 14336));
  EXPECT_EQ(twin.cpu().fused_decode_ops(), nullptr);  // the CPU has none: the unfused ops
  EXPECT_EQ(twin.gpu().fused_decode_ops(), &twin.gpu());
  Twin f32(DType::kF32);
  EXPECT_FALSE(f32.gpu().fused_decode(1));
}

TEST_P(CudaFused, RmsMatmulSwiGluMatchesNormMatmulSiluMul) {
  Twin twin(GetParam());
  Rng rng(12);
  for (const Shape& s : kShapes) {
    const int64_t f = s.n;  // w is (2F, K)
    Pair h = twin.floats({s.m, s.k}, scaled_rows(rng, s.m, s.k));
    Pair w = twin.floats({2 * f, s.k}, random_floats(rng, 2 * f * s.k, -0.1f, 0.1f));
    Pair ones = twin.floats({s.k}, std::vector<float>(static_cast<size_t>(s.k), 1.0f));
    Pair normed = twin.output({s.m, s.k});
    Pair gate_up = twin.output({s.m, 2 * f});
    Pair out = twin.output({s.m, f});
    twin.cpu().rms_norm(h.cpu, ones.cpu, 1e-6f, normed.cpu);
    twin.cpu().matmul(normed.cpu, w.cpu, nullptr, gate_up.cpu);
    twin.cpu().silu_mul(gate_up.cpu, out.cpu);
    twin.gpu().rms_matmul_swiglu(h.gpu, nullptr, w.gpu, 1e-6f, out.gpu);
    EXPECT_LT(twin.error(out), tolerance(GetParam())) << "m=" << s.m << " f=" << f << " k=" << s.k;
  }
}

TEST_P(CudaFused, MatmulAddAccumulatesIntoTheResidual) {
  Twin twin(GetParam());
  Rng rng(13);
  // Beside the GEMV shapes, two weights above the GEMV's 64 MiB rule: 1 token (the GEMV) and
  // 4 tokens (cuBLASLt with beta = 1 on the residual).
  std::vector<Shape> shapes(std::begin(kShapes), std::end(kShapes));
  shapes.push_back({1, 4096, 8448});
  shapes.push_back({4, 4096, 8448});
  for (const Shape& s : shapes) {
    const auto res0 = twin.representable(random_floats(rng, s.m * s.n, -2.0f, 2.0f));
    Pair x = twin.floats({s.m, s.k}, random_floats(rng, s.m * s.k));
    Pair w = twin.floats({s.n, s.k}, random_floats(rng, s.n * s.k, -0.05f, 0.05f));
    Pair residual = twin.floats({s.m, s.n}, res0);
    Pair prod = twin.output({s.m, s.n});
    twin.cpu().matmul(x.cpu, w.cpu, nullptr, prod.cpu);
    std::vector<float> want = twin.cpu_floats(prod.cpu);
    for (size_t i = 0; i < want.size(); ++i) want[i] += res0[i];
    twin.gpu().matmul_add(x.gpu, w.gpu, residual.gpu);
    EXPECT_LT(testing::rel_l2(twin.gpu_floats(residual.gpu), want), tolerance(GetParam()))
        << "m=" << s.m << " n=" << s.n << " k=" << s.k;
  }
}

// Llama-3 (GQA 4), a Qwen2-like head count with bias, MHA at head_dim 64 and head_dim 96.
struct RopeCase {
  int heads, kv_heads, head_dim, k;
  bool bias;
};

// rms_matmul_rope_cache against rms_norm, matmul and rope_and_cache on the CPU; with fp8_cache
// the cache is E4M3 (k_scale 0.03, v_scale 0.02; backend/ops.h, KvCacheLayer) and checked by
// expect_e4m3_cache_written.
void check_rms_matmul_rope_cache(Twin& twin, Rng& rng, bool fp8_cache) {
  const double tol = tolerance(twin.dtype());
  const float k_scale = fp8_cache ? 0.03f : 1.0f, v_scale = fp8_cache ? 0.02f : 1.0f;
  for (const RopeCase& c : {RopeCase{32, 8, 128, 4096, false}, RopeCase{14, 2, 64, 896, true},
                            RopeCase{8, 8, 64, 512, false}, RopeCase{4, 2, 96, 256, true}}) {
    for (const int64_t m : {1, 5, 8}) {
      AttentionShape shape;
      shape.num_heads = c.heads;
      shape.num_kv_heads = c.kv_heads;
      shape.head_dim = c.head_dim;
      const int64_t n = int64_t{c.heads + 2 * c.kv_heads} * c.head_dim, k = c.k;
      const int64_t blocks = 4, bs = 16;
      const int64_t cache = blocks * c.kv_heads * bs * c.head_dim;
      Pair h = twin.floats({m, k}, scaled_rows(rng, m, k));
      Pair w = twin.floats({n, k}, random_floats(rng, n * k, -0.05f, 0.05f));
      Pair b = twin.floats({n}, random_floats(rng, n));
      Pair ones = twin.floats({k}, std::vector<float>(static_cast<size_t>(k), 1.0f));
      const std::vector<uint8_t> k_before = testing::random_e4m3(rng, cache, k_scale);
      const std::vector<uint8_t> v_before = testing::random_e4m3(rng, cache, v_scale);
      const auto cache_pair = [&](const std::vector<uint8_t>& before) {
        return fp8_cache
                   ? twin.bytes(DType::kF8E4M3, {blocks, c.kv_heads, bs, c.head_dim}, before)
                   : twin.floats({blocks, c.kv_heads, bs, c.head_dim}, random_floats(rng, cache));
      };
      Pair kc = cache_pair(k_before);
      Pair vc = cache_pair(v_before);
      std::vector<int32_t> positions(static_cast<size_t>(m)), slots(static_cast<size_t>(m));
      for (int64_t i = 0; i < m; ++i) {
        positions[static_cast<size_t>(i)] = static_cast<int32_t>(rng.uniform_int(0, 8191));
        slots[static_cast<size_t>(i)] = static_cast<int32_t>(7 * i + 3);  // distinct slots
      }
      if (m > 1) slots[1] = -1;  // a padding row: no cache write
      std::vector<float> inv_freq(static_cast<size_t>(c.head_dim / 2));
      for (size_t i = 0; i < inv_freq.size(); ++i)
        inv_freq[i] = static_cast<float>(
            std::pow(500000.0, -2.0 * static_cast<double>(i) / static_cast<double>(c.head_dim)));
      Pair pos = twin.ints({m}, positions);
      Pair slot = twin.ints({m}, slots);
      Pair freq = twin.floats({c.head_dim / 2}, inv_freq, DType::kF32);
      Pair normed = twin.output({m, k});
      Pair qkv = twin.output({m, n});
      const Tensor* bias_cpu = c.bias ? &b.cpu : nullptr;
      twin.cpu().rms_norm(h.cpu, ones.cpu, 1e-5f, normed.cpu);
      twin.cpu().matmul(normed.cpu, w.cpu, bias_cpu, qkv.cpu);
      twin.cpu().rope_and_cache(qkv.cpu, pos.cpu, slot.cpu, freq.cpu,
                                {kc.cpu, vc.cpu, 16, k_scale, v_scale}, shape);
      twin.gpu().rms_matmul_rope_cache(h.gpu, nullptr, w.gpu, c.bias ? &b.gpu : nullptr, 1e-5f,
                                       pos.gpu, slot.gpu, freq.gpu,
                                       {kc.gpu, vc.gpu, 16, k_scale, v_scale}, shape, qkv.gpu);
      const std::string where = "heads " + std::to_string(c.heads) + "/" +
                                std::to_string(c.kv_heads) + " hd " + std::to_string(c.head_dim) +
                                " m " + std::to_string(m);
      EXPECT_LT(twin.error(qkv), tol) << "qkv, " << where;
      if (fp8_cache) {
        SCOPED_TRACE(where);
        testing::expect_e4m3_cache_written(twin, kc, qkv, k_before, slots, shape, 16, false,
                                           k_scale);
        testing::expect_e4m3_cache_written(twin, vc, qkv, v_before, slots, shape, 16, true,
                                           v_scale);
      } else {
        EXPECT_LT(twin.error(kc), tol) << "k cache, " << where;
        EXPECT_LT(twin.error(vc), tol) << "v cache, " << where;
      }
    }
  }
}

TEST_P(CudaFused, RmsMatmulRopeCacheMatchesNormMatmulRopeAndCache) {
  Twin twin(GetParam());
  Rng rng(15);
  check_rms_matmul_rope_cache(twin, rng, false);
}

// --kv-cache-dtype fp8: the fused epilogue writes the E4M3 cache as rope_and_cache does.
TEST_P(CudaFused, RmsMatmulRopeCacheWritesE4m3Cache) {
  Twin twin(GetParam());
  Rng rng(16);
  check_rms_matmul_rope_cache(twin, rng, true);
}

TEST_P(CudaFused, ScaleColumnsMultipliesEachColumnByItsGain) {
  Twin twin(GetParam());
  Rng rng(14);
  const int64_t n = 37, k = 256;
  const auto w0 = twin.representable(random_floats(rng, n * k));
  const auto g0 = twin.representable(random_floats(rng, k, 0.5f, 1.5f));
  Pair w = twin.floats({n, k}, w0);
  Pair g = twin.floats({k}, g0);
  twin.cpu().scale_columns(w.cpu, g.cpu);
  twin.gpu().scale_columns(w.gpu, g.gpu);
  const auto got = twin.gpu_floats(w.gpu);
  const auto cpu = twin.cpu_floats(w.cpu);
  for (int64_t i = 0; i < n * k; ++i) {
    const auto u = static_cast<size_t>(i);
    ASSERT_EQ(cpu[u], w0[u] * g0[static_cast<size_t>(i % k)]);
    ASSERT_EQ(got[u], testing::round_to(GetParam(), cpu[u])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, CudaFused, ::testing::Values(DType::kBF16, DType::kF16),
                         testing::dtype_param_name);

}  // namespace
}  // namespace ib::cuda
