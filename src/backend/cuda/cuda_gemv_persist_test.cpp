// The quantized formats' GEMVs on a persistent grid (IB_GEMV_PERSIST: fewer blocks than row tiles,
// each block looping over tiles and loading its next tile's first weights during the current
// tile's epilogue) and through the cp.async ring (IB_GEMV_RING) against the same kernels at one
// block per tile with their weights in registers. Each tile's arithmetic and order of steps is
// the same in all, so the outputs must be equal bit for bit; the default setting's results are
// checked against the CPU oracle by cuda_quant_test and cuda_quant4_test. Shapes have several
// tiles per block at 1 and 2 blocks per SM (an H200 has 132 SMs), and a partial last tile.
// Also the W4A16 ring with 4 and 2 warps per block (IB_GEMV_INT4_WARPS) against 8: another
// order of the warps' sums, so within a stated tolerance; and the dense GEMVs' ring
// (IB_GEMV_DENSE_RING) against registers, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/detail/carveout.h"
#include "backend/cuda/detail/gemv_test_support.h"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::quantize;
using testing::random_floats;
using testing::rope_case;
using testing::RopeCase;
using testing::Twin;

struct Format {
  WeightFormat format;
  const char* name;
};

// Resets the process-wide settings whatever a test does.
class PersistGuard {
 public:
  PersistGuard()
      : saved_(gemv_persist_blocks_per_sm()), ring_(gemv_ring()), warps_(gemv_int4_warps()) {}
  ~PersistGuard() {
    set_gemv_persist_blocks_per_sm(saved_);
    set_gemv_ring(ring_);
    set_gemv_int4_warps(warps_);
  }

 private:
  int saved_;
  bool ring_;
  int warps_;
};

class CudaGemvPersist : public ::testing::TestWithParam<Format> {
 protected:
  WeightFormat format() const { return GetParam().format; }
  void SetUp() override {
    IB_REQUIRE_CUDA();
    Twin probe(DType::kBF16);
    if (!probe.gpu().supports_weight_format(format()))
      GTEST_SKIP() << "this GPU lacks the tensor cores of " << GetParam().name;
  }
};

// The GPU floats of out after run() at each persistent and ring setting must equal those at one
// block per tile without the ring.
template <typename F>
void expect_same_at_every_setting(Twin& twin, const Pair& out, const std::string& what, F run) {
  PersistGuard guard;
  set_gemv_persist_blocks_per_sm(0);
  set_gemv_ring(false);
  set_gemv_int4_warps(8);  // the registers' split of K, whatever the launch's tiles
  run();
  const std::vector<float> want = twin.gpu_floats(out.gpu);
  for (const bool ring : {true, false}) {
    for (const int per_sm : {0, 1, 2}) {
      if (!ring && per_sm == 0) continue;  // the reference
      set_gemv_ring(ring);
      set_gemv_persist_blocks_per_sm(per_sm);
      run();
      const Status status = twin.gpu().device_status();
      ASSERT_TRUE(status.ok()) << what << ": " << status.error().message;
      const std::vector<float> got = twin.gpu_floats(out.gpu);
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i] ? 1 : 0;
      EXPECT_EQ(differ, 0u) << what << " at " << per_sm << " blocks per SM, ring "
                            << (ring ? "on" : "off");
    }
  }
}

TEST_P(CudaGemvPersist, MatmulEqualsOneBlockPerTile) {
  Twin twin(DType::kBF16);
  Rng rng(7);
  const int64_t max_m = gemv_max_m(format());
  for (const auto& [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{1, 6144, 4096},
                                {8, 4100, 1024},
                                {max_m, 5000, 512}}) {
    const Pair x = twin.floats({m, k}, random_floats(rng, m * k, -2.0f, 2.0f));
    const Pair b = twin.floats({n}, random_floats(rng, n));
    const WeightRef w = quantize(twin, rng, n, k, format());
    const Pair out = twin.output({m, n});
    expect_same_at_every_setting(twin, out, "matmul m=" + std::to_string(m),
                                 [&] { twin.gpu().matmul(x.gpu, w, &b.gpu, out.gpu); });
  }
}

TEST_P(CudaGemvPersist, FusedOpsEqualOneBlockPerTile) {
  Twin twin(DType::kBF16);
  Rng rng(8);
  const float eps = 1e-5f;
  const int64_t k = 2048;
  for (const int64_t m : {1, 6}) {
    const Pair h = twin.floats({m, k}, random_floats(rng, m * k, -1.5f, 1.5f));
    const Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));

    const int64_t f = 2312;  // 289 SwiGLU tiles of 8 features, the last one partial
    const WeightRef wgu = quantize(twin, rng, 2 * f, k, format());
    const Pair act = twin.output({m, f});
    expect_same_at_every_setting(twin, act, "swiglu m=" + std::to_string(m), [&] {
      twin.gpu().rms_matmul_swiglu(h.gpu, &gain.gpu, wgu, eps, act.gpu);
    });

    const int64_t n = 4096;
    const std::vector<float> res0 = random_floats(rng, m * n);
    const WeightRef wo = quantize(twin, rng, n, k, format());
    const Pair residual = twin.floats({m, n}, res0);
    expect_same_at_every_setting(twin, residual, "matmul_add m=" + std::to_string(m), [&] {
      twin.gpu().copy_from_host(residual.gpu, twin.representable(res0).data(), DType::kF32);
      twin.gpu().matmul_add(h.gpu, wo, residual.gpu);
    });

    const RopeCase rc = rope_case(twin, m);
    const WeightRef wq = quantize(twin, rng, rc.nq, k, format());
    const Pair bias = twin.floats({rc.nq}, random_floats(rng, rc.nq));
    const auto rope = [&] {
      twin.gpu().rms_matmul_rope_cache(h.gpu, &gain.gpu, wq, &bias.gpu, eps, rc.pos.gpu,
                                       rc.slot.gpu, rc.freq.gpu, rc.kv(), rc.shape, rc.qkv.gpu);
    };
    expect_same_at_every_setting(twin, rc.qkv, "qkv m=" + std::to_string(m), rope);
    expect_same_at_every_setting(twin, rc.kc, "k cache m=" + std::to_string(m), rope);
  }
}

// The GPU floats of out after run() with 4 and 2 warps per block (IB_GEMV_INT4_WARPS) against 8:
// the warps split K differently, so the fp32 partial sums are added in another order and an
// output may round to x's dtype on the other side of a tie. Relative L2 <= 1e-3 (a lost or
// doubled warp's share of K would be off by tens of percent).
template <typename F>
void expect_close_at_each_warps(Twin& twin, const Pair& out, const std::string& what, F run) {
  PersistGuard guard;
  set_gemv_persist_blocks_per_sm(0);
  set_gemv_ring(true);
  set_gemv_int4_warps(8);
  run();
  const std::vector<float> want = twin.gpu_floats(out.gpu);
  for (const int warps : {4, 2}) {
    set_gemv_int4_warps(warps);
    run();
    const Status status = twin.gpu().device_status();
    ASSERT_TRUE(status.ok()) << what << ": " << status.error().message;
    const std::vector<float> got = twin.gpu_floats(out.gpu);
    double diff = 0.0, norm = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
      norm += static_cast<double>(want[i]) * want[i];
    }
    ASSERT_GT(norm, 0.0) << what;
    EXPECT_LE(std::sqrt(diff / norm), 1e-3) << what << " at " << warps << " warps per block";
  }
}

TEST(CudaGemvInt4Warps, FewerWarpsPerBlockMatchEight) {
  IB_REQUIRE_CUDA();
  Twin twin(DType::kBF16);
  Rng rng(9);
  const WeightFormat format = WeightFormat::kInt4W4A16;
  // K = 640: 5 steps, fewer than 8 warps, and a different count per warp at 2 and 4.
  for (const auto& [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 6144, 4096}, {4, 4100, 1024}, {3, 500, 640}}) {
    const Pair x = twin.floats({m, k}, random_floats(rng, m * k, -2.0f, 2.0f));
    const Pair b = twin.floats({n}, random_floats(rng, n));
    const WeightRef w = quantize(twin, rng, n, k, format);
    const Pair out = twin.output({m, n});
    expect_close_at_each_warps(twin, out, "matmul m=" + std::to_string(m),
                               [&] { twin.gpu().matmul(x.gpu, w, &b.gpu, out.gpu); });
  }
  const float eps = 1e-5f;
  const int64_t m = 2, k = 2048, f = 2312, n = 4096;
  const Pair h = twin.floats({m, k}, random_floats(rng, m * k, -1.5f, 1.5f));
  const Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));
  const WeightRef wgu = quantize(twin, rng, 2 * f, k, format);
  const Pair act = twin.output({m, f});
  expect_close_at_each_warps(twin, act, "swiglu", [&] {
    twin.gpu().rms_matmul_swiglu(h.gpu, &gain.gpu, wgu, eps, act.gpu);
  });
  const std::vector<float> res0 = random_floats(rng, m * n);
  const WeightRef wo = quantize(twin, rng, n, k, format);
  const Pair residual = twin.floats({m, n}, res0);
  expect_close_at_each_warps(twin, residual, "matmul_add", [&] {
    twin.gpu().copy_from_host(residual.gpu, twin.representable(res0).data(), DType::kF32);
    twin.gpu().matmul_add(h.gpu, wo, residual.gpu);
  });
  const RopeCase rc = rope_case(twin, m);
  const WeightRef wq = quantize(twin, rng, rc.nq, k, format);
  const auto rope = [&] {
    twin.gpu().rms_matmul_rope_cache(h.gpu, &gain.gpu, wq, nullptr, eps, rc.pos.gpu, rc.slot.gpu,
                                     rc.freq.gpu, rc.kv(), rc.shape, rc.qkv.gpu);
  };
  expect_close_at_each_warps(twin, rc.qkv, "qkv", rope);
  expect_close_at_each_warps(twin, rc.vc, "v cache", rope);
}

// IB_GEMV_DENSE_RING: the dense GEMVs (plain and fused, launched directly: the backend's matmul may
// take cuBLASLt) through the ring against registers. The same steps in the same order: equal bit
// for bit. K 640 gives the warps different step counts; 4,100 rows a partial tile.
TEST(CudaGemvDenseRing, EqualsRegistersBitForBit) {
  IB_REQUIRE_CUDA();
  struct Guard {
    bool saved = gemv_dense_ring();
    ~Guard() { set_gemv_dense_ring(saved); }
  } guard;
  Twin twin(DType::kBF16);
  Rng rng(10);
  cudaStream_t stream = twin.gpu().stream();
  const auto dense = [&](int64_t n, int64_t k) {
    WeightRef w;
    w.data = twin.floats({n, k}, random_floats(rng, n * k, -0.05f, 0.05f)).gpu;
    return w;
  };
  const auto expect_same = [&](const Pair& out, const std::string& what, const auto& run) {
    set_gemv_dense_ring(false);
    run();
    const std::vector<float> want = twin.gpu_floats(out.gpu);
    set_gemv_dense_ring(true);
    run();
    const Status status = twin.gpu().device_status();
    ASSERT_TRUE(status.ok()) << what << ": " << status.error().message;
    EXPECT_EQ(twin.gpu_floats(out.gpu), want) << what;
  };
  for (const auto& [m, n, k] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 6144, 4096}, {8, 4100, 1024}, {3, 500, 640}}) {
    const Pair x = twin.floats({m, k}, random_floats(rng, m * k, -2.0f, 2.0f));
    const Pair b = twin.floats({n}, random_floats(rng, n));
    const WeightRef w = dense(n, k);
    const Pair out = twin.output({m, n});
    expect_same(out, "matmul m=" + std::to_string(m),
                [&] { launch_gemv(x.gpu, w, &b.gpu, out.gpu, stream); });
  }
  const float eps = 1e-5f;
  const int64_t m = 5, k = 2048, f = 2312, n = 4096;
  const Pair h = twin.floats({m, k}, random_floats(rng, m * k, -1.5f, 1.5f));
  const WeightRef wgu = dense(2 * f, k);
  const Pair act = twin.output({m, f});
  expect_same(act, "swiglu", [&] {
    launch_gemv_fused(h.gpu, nullptr, wgu, nullptr, act.gpu, GemvFusion::kRmsSwiGlu, eps, stream);
  });
  const std::vector<float> res0 = random_floats(rng, m * n);
  const WeightRef wo = dense(n, k);
  const Pair residual = twin.floats({m, n}, res0);
  expect_same(residual, "matmul_add", [&] {
    twin.gpu().copy_from_host(residual.gpu, twin.representable(res0).data(), DType::kF32);
    launch_gemv_fused(h.gpu, nullptr, wo, nullptr, residual.gpu, GemvFusion::kAccumulate, eps,
                      stream);
  });
  const RopeCase rc = rope_case(twin, m);
  const WeightRef wq = dense(rc.nq, k);
  const auto rope = [&] {
    launch_gemv_rope_cache(h.gpu, nullptr, wq, nullptr, eps, rc.pos.gpu, rc.slot.gpu, rc.freq.gpu,
                           rc.kv(), rc.shape, rc.qkv.gpu, stream);
  };
  expect_same(rc.qkv, "qkv", rope);
  expect_same(rc.kc, "k cache", rope);
}

// IB_SMEM_CARVEOUT: a carve-out preference on every launched kernel is a hint: the dense GEMV in
// registers and through the ring (68 KB a block) give the same results under the driver's choice
// and under the largest shared-memory preference.
TEST(CudaGemvDenseRing, CarveoutPreferenceChangesNoResult) {
  IB_REQUIRE_CUDA();
  struct Guard {
    bool ring = gemv_dense_ring();
    int carveout = smem_carveout();
    ~Guard() {
      set_gemv_dense_ring(ring);
      set_smem_carveout(carveout);
    }
  } guard;
  Twin twin(DType::kBF16);
  Rng rng(12);
  const int64_t m = 8, n = 4100, k = 1024;
  WeightRef w;
  w.data = twin.floats({n, k}, random_floats(rng, n * k, -0.05f, 0.05f)).gpu;
  const Pair x = twin.floats({m, k}, random_floats(rng, m * k, -2.0f, 2.0f));
  const Pair out = twin.output({m, n});
  for (const bool ring : {false, true}) {
    set_gemv_dense_ring(ring);
    set_smem_carveout(-1);
    launch_gemv(x.gpu, w, nullptr, out.gpu, twin.gpu().stream());
    const std::vector<float> want = twin.gpu_floats(out.gpu);
    set_smem_carveout(100);
    launch_gemv(x.gpu, w, nullptr, out.gpu, twin.gpu().stream());
    const Status status = twin.gpu().device_status();
    ASSERT_TRUE(status.ok()) << status.error().message;
    EXPECT_EQ(twin.gpu_floats(out.gpu), want) << "ring " << ring;
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaGemvPersist,
                         ::testing::Values(Format{WeightFormat::kFp8E4M3, "fp8"},
                                           Format{WeightFormat::kInt8W8A16, "int8_w8a16"},
                                           Format{WeightFormat::kInt8W8A8, "int8_w8a8"},
                                           Format{WeightFormat::kInt4W4A16, "awq"},
                                           Format{WeightFormat::kNf4, "nf4"}),
                         [](const ::testing::TestParamInfo<Format>& p) { return p.param.name; });

}  // namespace
}  // namespace ib::cuda
