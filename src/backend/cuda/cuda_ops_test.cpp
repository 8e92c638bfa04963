// Differential tests of the CUDA elementwise, norm and GEMM ops against the CPU reference, for
// fp32, bf16 and fp16 activations (tolerances in detail/test_support.h).
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;

class CudaOps : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

TEST_P(CudaOps, FillUniformMatchesCpuBitForBit) {
  Twin twin(GetParam());
  const int64_t n = 100003;
  Pair p = twin.output({n});
  twin.cpu().fill_uniform(p.cpu, 1234, 7, 0.37f);
  twin.gpu().fill_uniform(p.gpu, 1234, 7, 0.37f);
  const auto cpu = twin.cpu_floats(p.cpu);
  const auto gpu = twin.gpu_floats(p.gpu);
  int64_t mismatches = 0;
  for (size_t i = 0; i < cpu.size(); ++i)
    mismatches += testing::round_to(GetParam(), cpu[i]) != gpu[i];
  EXPECT_EQ(mismatches, 0);
  EXPECT_NE(gpu[0], gpu[1]);
}

TEST_P(CudaOps, FillConstantWritesEveryElement) {
  Twin twin(GetParam());
  Pair p = twin.output({3, 1001});
  twin.gpu().fill_constant(p.gpu, -2.5f);
  for (float v : twin.gpu_floats(p.gpu)) ASSERT_EQ(v, -2.5f);
}

TEST_P(CudaOps, CopyFromHostConvertsAcrossStagingChunks) {
  Twin twin(GetParam());
  Rng rng(3);
  // More elements than one staging chunk holds, so the chunked conversion path is covered.
  const int64_t n = static_cast<int64_t>(CudaBackend::kStagingBytes / sizeof(float)) + 4099;
  const auto host = random_floats(rng, n, -3.0f, 3.0f);
  Pair p = twin.output({n});
  twin.gpu().copy_from_host(p.gpu, host.data(), DType::kF32);
  const auto got = twin.gpu_floats(p.gpu);
  int64_t mismatches = 0;
  for (size_t i = 0; i < host.size(); ++i)
    mismatches += got[i] != testing::round_to(GetParam(), host[i]);
  EXPECT_EQ(mismatches, 0);
  // bf16 bits from the host into the activation dtype.
  std::vector<uint16_t> bits(1000);
  for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16_bits(host[i]);
  Pair q = twin.output({1000});
  twin.gpu().copy_from_host(q.gpu, bits.data(), DType::kBF16);
  const auto got_q = twin.gpu_floats(q.gpu);
  for (size_t i = 0; i < bits.size(); ++i)
    ASSERT_EQ(got_q[i], testing::round_to(GetParam(), bf16_bits_to_f32(bits[i])));
}

TEST_P(CudaOps, EmbeddingAndGatherRowsCopyExactly) {
  Twin twin(GetParam());
  Rng rng(5);
  for (const int64_t d : {64, 4096, 13}) {
    const int64_t vocab = 97, t = 11;
    Pair table = twin.floats({vocab, d}, random_floats(rng, vocab * d));
    std::vector<int32_t> ids(t);
    for (auto& id : ids) id = static_cast<int32_t>(rng.uniform_int(0, vocab - 1));
    Pair tok = twin.ints({t}, ids);
    Pair out = twin.output({t, d});
    twin.cpu().embedding(tok.cpu, table.cpu, out.cpu);
    twin.gpu().embedding(tok.gpu, table.gpu, out.gpu);
    EXPECT_EQ(twin.error(out), 0.0) << "d=" << d;
    Pair rows = twin.output({t, d});
    twin.cpu().gather_rows(table.cpu, tok.cpu, rows.cpu);
    twin.gpu().gather_rows(table.gpu, tok.gpu, rows.gpu);
    EXPECT_EQ(twin.error(rows), 0.0) << "d=" << d;
  }
}

TEST_P(CudaOps, GatherRowsOfF32Logits) {
  Twin twin(GetParam());
  Rng rng(6);
  const int64_t n = 9, v = 1003;
  Pair logits = twin.floats({n, v}, random_floats(rng, n * v, -10, 10), DType::kF32);
  Pair ids = twin.ints({3}, std::vector<int32_t>{8, 0, 4});
  Pair out = twin.output({3, v}, DType::kF32);
  twin.cpu().gather_rows(logits.cpu, ids.cpu, out.cpu);
  twin.gpu().gather_rows(logits.gpu, ids.gpu, out.gpu);
  EXPECT_EQ(twin.error(out), 0.0);
}

// rms_norm and add_rms_norm of t rows of d against the CPU; then also(x, w, out) with the GPU's
// rms_norm output still in out.
template <typename F>
void expect_rms_norms(Twin& twin, Rng& rng, int64_t t, int64_t d, F also) {
  const DType dtype = twin.dtype();
  Pair x = twin.floats({t, d}, random_floats(rng, t * d, -2, 2));
  Pair w = twin.floats({d}, random_floats(rng, d, 0.5f, 1.5f));
  Pair out = twin.output({t, d});
  twin.cpu().rms_norm(x.cpu, w.cpu, 1e-5f, out.cpu);
  twin.gpu().rms_norm(x.gpu, w.gpu, 1e-5f, out.gpu);
  EXPECT_LT(twin.error(out), tolerance(dtype)) << "rms_norm t=" << t << " d=" << d;
  also(x, w, out);

  Pair res = twin.floats({t, d}, random_floats(rng, t * d, -3, 3));
  Pair out2 = twin.output({t, d});
  twin.cpu().add_rms_norm(res.cpu, x.cpu, w.cpu, 1e-6f, out2.cpu);
  twin.gpu().add_rms_norm(res.gpu, x.gpu, w.gpu, 1e-6f, out2.gpu);
  EXPECT_LT(twin.error(res), tolerance(dtype)) << "residual t=" << t << " d=" << d;
  EXPECT_LT(twin.error(out2), tolerance(dtype)) << "add_rms_norm t=" << t << " d=" << d;
}

TEST_P(CudaOps, RmsNormAndFusedResidualAdd) {
  Twin twin(GetParam());
  Rng rng(7);
  for (const auto& [t, d] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 4096}, {3, 5120}, {17, 64}, {5, 100}, {2, 3072}}) {
    expect_rms_norms(twin, rng, t, d, [](const Pair&, const Pair&, const Pair&) {});
  }
}

// IB_NORM_REGS's register form against the CPU too, and against the two-pass kernel bit for bit:
// rows of 1, 2 and 3-4 vectors per thread (4,096, 3,072, 5,120 and 8,192), a row shorter than
// the block's vectors (64), and rows past 4 vectors per thread (8,200; 100, not a whole vector)
// that keep the two-pass kernel.
TEST_P(CudaOps, RmsNormRegisterFormMatchesTheCpu) {
  struct Guard {
    bool saved = norm_regs();
    ~Guard() { set_norm_regs(saved); }
  } guard;
  set_norm_regs(true);
  Twin twin(GetParam());
  Rng rng(17);
  for (const auto& [t, d] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 4096}, {3, 5120}, {2, 3072}, {2, 8192}, {17, 64}, {2, 8200}, {5, 100}}) {
    expect_rms_norms(twin, rng, t, d, [&](const Pair& x, const Pair& w, const Pair& out) {
      // The same arithmetic in the same order as the two-pass kernel: equal bit for bit.
      const std::vector<float> regs = twin.gpu_floats(out.gpu);
      set_norm_regs(false);
      twin.gpu().rms_norm(x.gpu, w.gpu, 1e-5f, out.gpu);
      set_norm_regs(true);
      EXPECT_EQ(twin.gpu_floats(out.gpu), regs) << "rms_norm t=" << x.gpu.rows();
    });
  }
}

// IB_NORM_POST: norm_add_rms_norm's one kernel against the CPU's two ops, and bit for bit against
// the GPU's two kernels (the switch off), residual and out; rows of 1, 2 and 3-4 vectors per
// thread (Gemma-2-2B's 2,304, 9B's 3,584, 27B's 4,608, 8,192), and rows the register form does
// not take (8,200; 100), where the op runs the two kernels.
TEST_P(CudaOps, NormAddRmsNormInOneKernel) {
  struct Guard {
    bool saved = norm_post();
    ~Guard() { set_norm_post(saved); }
  } guard;
  Twin twin(GetParam());
  const DType dtype = twin.dtype();
  Rng rng(23);
  for (const auto& [t, d] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 2304}, {3, 3584}, {2, 4608}, {1, 8192}, {2, 8200}, {5, 100}}) {
    const auto xv = random_floats(rng, t * d, -2, 2);
    const auto rv = random_floats(rng, t * d, -3, 3);
    Pair xw = twin.floats({d}, random_floats(rng, d, 0.5f, 1.5f));
    Pair w = twin.floats({d}, random_floats(rng, d, 0.5f, 1.5f));
    std::vector<std::vector<float>> unfused;  // the GPU's residual and out, switch off
    for (const bool fused : {false, true}) {
      set_norm_post(fused);
      Pair x = twin.floats({t, d}, xv);
      Pair res = twin.floats({t, d}, rv);
      Pair out = twin.output({t, d});
      twin.cpu().norm_add_rms_norm(res.cpu, x.cpu, xw.cpu, w.cpu, 1e-6f, out.cpu);
      twin.gpu().norm_add_rms_norm(res.gpu, x.gpu, xw.gpu, w.gpu, 1e-6f, out.gpu);
      const std::string where = "t=" + std::to_string(t) + " d=" + std::to_string(d) +
                                (fused ? " (IB_NORM_POST=1)" : " (IB_NORM_POST=0)");
      EXPECT_LT(twin.error(res), tolerance(dtype)) << "residual " << where;
      EXPECT_LT(twin.error(out), tolerance(dtype)) << "out " << where;
      if (!fused) {
        unfused = {twin.gpu_floats(res.gpu), twin.gpu_floats(out.gpu)};
      } else if (dtype != DType::kF32) {
        EXPECT_EQ(twin.gpu_floats(res.gpu), unfused[0]) << "residual " << where;
        EXPECT_EQ(twin.gpu_floats(out.gpu), unfused[1]) << "out " << where;
      } else {
        // fp32 keeps the normed x in a register, where the compiler may fuse its product with the
        // residual add (one rounding, not two): the last bit may differ (measured on the H200).
        EXPECT_LT(testing::rel_l2(twin.gpu_floats(res.gpu), unfused[0]), 1e-6)
            << "residual " << where;
        EXPECT_LT(testing::rel_l2(twin.gpu_floats(out.gpu), unfused[1]), 1e-6) << "out " << where;
      }
    }
  }
}

TEST_P(CudaOps, SiluMul) {
  Twin twin(GetParam());
  Rng rng(8);
  for (const auto& [t, f] :
       std::vector<std::pair<int64_t, int64_t>>{{1, 14336}, {7, 13}, {4, 64}}) {
    Pair gu = twin.floats({t, 2 * f}, random_floats(rng, t * 2 * f, -6, 6));
    Pair out = twin.output({t, f});
    twin.cpu().silu_mul(gu.cpu, out.cpu);
    twin.gpu().silu_mul(gu.gpu, out.gpu);
    EXPECT_LT(twin.error(out), tolerance(GetParam())) << "t=" << t << " f=" << f;
  }
}

// Gemma-2's elementwise ops against the CPU oracle: GeGLU (tanh gelu), the affine map (scaled
// embeddings, (1 + w) gains) and the tanh soft-cap (final logits).
TEST_P(CudaOps, GeluTanhMulAffineAndSoftcap) {
  Twin twin(GetParam());
  Rng rng(18);
  for (const auto& [t, f] : std::vector<std::pair<int64_t, int64_t>>{{1, 14336}, {7, 13}}) {
    Pair gu = twin.floats({t, 2 * f}, random_floats(rng, t * 2 * f, -6, 6));
    Pair out = twin.output({t, f});
    twin.cpu().gelu_tanh_mul(gu.cpu, out.cpu);
    twin.gpu().gelu_tanh_mul(gu.gpu, out.gpu);
    EXPECT_LT(twin.error(out), tolerance(GetParam())) << "t=" << t << " f=" << f;
  }
  Pair x = twin.floats({5, 301}, random_floats(rng, 5 * 301, -80, 80));
  twin.cpu().affine(x.cpu, 0.25f, 1.0f);
  twin.gpu().affine(x.gpu, 0.25f, 1.0f);
  EXPECT_LT(twin.error(x), tolerance(GetParam())) << "affine";
  twin.cpu().softcap(x.cpu, 3.0f);
  twin.gpu().softcap(x.gpu, 3.0f);
  EXPECT_LT(twin.error(x), tolerance(GetParam())) << "softcap";
}

struct GemmCase {
  int64_t m, n, k;
  bool bias;
  bool f32_out;
};

// Runs one matmul on both backends; gemv_max_m selects the GPU path (0: cuBLASLt only).
double matmul_error(Twin& twin, Rng& rng, const GemmCase& c, int gemv_max_m) {
  const float a = 1.0f / std::sqrt(static_cast<float>(c.k));
  Pair x = twin.floats({c.m, c.k}, random_floats(rng, c.m * c.k));
  Pair w = twin.floats({c.n, c.k}, random_floats(rng, c.n * c.k, -a, a));
  Pair b = twin.floats({c.n}, random_floats(rng, c.n, -0.5f, 0.5f));
  Pair out = twin.output({c.m, c.n}, c.f32_out ? std::optional(DType::kF32) : std::nullopt);
  twin.gpu().set_gemv_max_m(gemv_max_m);
  twin.cpu().matmul(x.cpu, w.cpu, c.bias ? &b.cpu : nullptr, out.cpu);
  twin.gpu().matmul(x.gpu, w.gpu, c.bias ? &b.gpu : nullptr, out.gpu);
  return twin.error(out);
}

TEST_P(CudaOps, MatmulThroughCublasLt) {
  Twin twin(GetParam());
  Rng rng(9);
  const std::vector<GemmCase> cases = {{1, 40, 64, false, false},    {5, 1000, 100, true, false},
                                       {17, 256, 4096, false, true}, {64, 4096, 512, true, false},
                                       {130, 96, 320, true, true},   {33, 7, 24, false, false}};
  for (const auto& c : cases) {
    EXPECT_LT(matmul_error(twin, rng, c, 0), tolerance(GetParam()))
        << "m=" << c.m << " n=" << c.n << " k=" << c.k << " bias=" << c.bias;
  }
}

TEST_P(CudaOps, MatmulThroughTensorCoreGemv) {
  Twin twin(GetParam());
  Rng rng(10);
  // Every M the GEMV takes (1..32 covers its three n-tile variants), odd N (partial row
  // groups), K at one warp step and at uneven step counts per warp.
  const std::vector<int64_t> ms = {1, 2, 3, 7, 8, 9, 15, 16, 17, 24, 31, 32};
  const std::vector<std::pair<int64_t, int64_t>> nks = {
      {16, 64}, {37, 576}, {1000, 4096}, {4096, 1088}};
  int i = 0;
  for (int64_t m : ms) {
    const auto [n, k] = nks[static_cast<size_t>(i++) % nks.size()];
    const GemmCase c{m, n, k, m % 2 == 1, m % 3 == 0};
    EXPECT_LT(matmul_error(twin, rng, c, kGemvMaxM), tolerance(GetParam()))
        << "m=" << m << " n=" << n << " k=" << k;
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaOps, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         testing::dtype_param_name);

}  // namespace
}  // namespace ib::cuda
