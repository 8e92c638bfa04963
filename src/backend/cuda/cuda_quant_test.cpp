// Differential tests of the quantized formats' ops against the CPU oracle (backend/weight.h),
// for FP8 E4M3 (W8A8), INT8 W8A16 and INT8 W8A8: quantize_weight bit for bit; the GEMV (FP8 and
// W8A8 up to 8 tokens, W8A16 up to 32) and above it cuBLASLt (FP8: the E4M3 GEMM with
// outer-vector scales; W8A8: the int32 GEMM and a scaling kernel; W8A16: the weight dequantized
// to bf16/fp16 first, or the weight-only tensor-core GEMM, IB_QUANT_GEMM); and the fused decode
// ops with an unfolded norm gain. Tolerance: the GPU rounds its output to bf16/fp16 once and sums
// in another order (W8A16 above 32 tokens also rounds each dequantized weight, and its fused ops
// the normalised x, to the dtype); the quantized inputs are identical, so the stated bound is the
// dtype's (testing::tolerance).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/quant_switches.h"
#include "backend/cuda/detail/sync_test_support.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;

// (activation dtype, weight format)
using QuantParam = std::tuple<DType, WeightFormat>;

class CudaQuant : public ::testing::TestWithParam<QuantParam> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  WeightFormat format() const { return std::get<1>(GetParam()); }
  void SetUp() override {
    IB_REQUIRE_CUDA();
    Twin probe(dtype());
    if (!probe.gpu().supports_weight_format(format()))
      GTEST_SKIP() << "this GPU lacks the tensor cores of " << weight_format_name(format());
  }
};

using QuantPair = testing::WeightPair;

// dense (N, K) quantized on each side by its own quantize_weight.
QuantPair quantize(Twin& twin, const Pair& dense, int64_t n, int64_t k, WeightFormat format) {
  const Pair data = twin.empty(quantized_data_dtype(format), {n, k});
  const Pair scales = twin.empty(DType::kF32, {n});
  QuantPair w;
  w.cpu.format = w.gpu.format = format;
  w.cpu.data = data.cpu;
  w.gpu.data = data.gpu;
  w.cpu.scales = scales.cpu;
  w.gpu.scales = scales.gpu;
  twin.cpu().quantize_weight(dense.cpu, w.cpu);
  twin.gpu().quantize_weight(dense.gpu, w.gpu);
  return w;
}

// Rows of different magnitudes (a wrong per-row or per-token scale shows), one row all zeros.
std::vector<float> ragged_rows(Rng& rng, int64_t rows, int64_t k, float amplitude) {
  std::vector<float> v = random_floats(rng, rows * k, -amplitude, amplitude);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < k; ++j)
      v[static_cast<size_t>(i * k + j)] *= i == 1 ? 0.0f : 0.05f + static_cast<float>(i % 7);
  return v;
}

TEST_P(CudaQuant, QuantizeWeightMatchesTheCpuBitForBit) {
  Twin twin(dtype());
  Rng rng(21);
  for (const auto& [n, k] : {std::pair<int64_t, int64_t>{37, 4096}, {1024, 256}, {3, 64}}) {
    Pair dense = twin.floats({n, k}, ragged_rows(rng, n, k, 1.0f));
    const QuantPair w = quantize(twin, dense, n, k, format());
    std::vector<uint8_t> cpu_q(static_cast<size_t>(n * k)), gpu_q(cpu_q.size());
    std::vector<float> cpu_s(static_cast<size_t>(n)), gpu_s(cpu_s.size());
    twin.cpu().copy_to_host(w.cpu.data, cpu_q.data());
    twin.gpu().copy_to_host(w.gpu.data, gpu_q.data());
    twin.cpu().copy_to_host(w.cpu.scales, cpu_s.data());
    twin.gpu().copy_to_host(w.gpu.scales, gpu_s.data());
    EXPECT_EQ(cpu_s, gpu_s) << n << "x" << k;
    int64_t differ = 0;
    for (size_t i = 0; i < cpu_q.size(); ++i) differ += cpu_q[i] != gpu_q[i];
    EXPECT_EQ(differ, 0) << n << "x" << k;
  }
}

// 1..8 (W8A16: 32) tokens take the GEMV, more take cuBLASLt; N not a multiple of 16 on the small
// K.
struct Shape {
  int64_t m, n, k;
};
const Shape kShapes[] = {{1, 6144, 4096}, {3, 1000, 256},   {8, 4096, 4096},   {16, 512, 1024},
                         {32, 1152, 896}, {33, 1024, 4096}, {200, 4096, 1024}, {1, 3, 64}};

void expect_matmul_shapes(Twin& twin, Rng& rng, std::span<const Shape> shapes,
                          WeightFormat format) {
  for (const Shape& s : shapes) {
    for (const bool with_bias : {false, true}) {
      Pair x = twin.floats({s.m, s.k}, ragged_rows(rng, s.m, s.k, 2.0f));
      Pair dense = twin.floats({s.n, s.k}, ragged_rows(rng, s.n, s.k, 0.05f));
      Pair b = twin.floats({s.n}, random_floats(rng, s.n));
      const QuantPair w = quantize(twin, dense, s.n, s.k, format);
      Pair out = twin.output({s.m, s.n});
      twin.cpu().matmul(x.cpu, w.cpu, with_bias ? &b.cpu : nullptr, out.cpu);
      twin.gpu().matmul(x.gpu, w.gpu, with_bias ? &b.gpu : nullptr, out.gpu);
      const Status status = twin.gpu().device_status();
      ASSERT_TRUE(status.ok()) << "m=" << s.m << ": " << status.error().message;
      EXPECT_LT(twin.error(out), tolerance(twin.dtype()))
          << "m=" << s.m << " n=" << s.n << " k=" << s.k << " bias=" << with_bias;
    }
  }
}

// W8A16 past the GEMV on the dequantizing path (IB_QUANT_GEMM=0; W8A16TensorCoreGemm... below).
TEST_P(CudaQuant, MatmulMatchesTheCpuOracle) {
  Twin twin(dtype());
  twin.gpu().set_quant_gemm_rows(0);
  Rng rng(22);
  expect_matmul_shapes(twin, rng, kShapes, format());
}

// Readies a freshly quantized weight of `rows` rows for a test (as it is, or with static scales).
using Prepare = std::function<QuantPair(QuantPair, int64_t rows)>;
const Prepare as_quantized = [](QuantPair w, int64_t) { return w; };

// rms_matmul_swiglu with the norm's gain unfolded (Llama-3-8B's K, a small F) against rms_norm,
// matmul and silu_mul on the CPU.
void expect_swiglu(Twin& twin, Rng& rng, WeightFormat format, int64_t m, const Prepare& prepare,
                   const std::string& what) {
  const float eps = 1e-5f;
  const int64_t k = 4096, f = 256;
  Pair h = twin.floats({m, k}, ragged_rows(rng, m, k, 1.0f));
  Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));
  Pair w_dense = twin.floats({2 * f, k}, random_floats(rng, 2 * f * k, -0.05f, 0.05f));
  const QuantPair w = prepare(quantize(twin, w_dense, 2 * f, k, format), 2 * f);
  testing::expect_rms_swiglu(twin, h, gain, eps, w, what);
}

// matmul_add (residual += x @ w^T) against the CPU's matmul and a host add.
void expect_matmul_add(Twin& twin, Rng& rng, WeightFormat format, int64_t m, const Prepare& prepare,
                       const std::string& what) {
  const int64_t n = 4096, kd = 1024;
  Pair x = twin.floats({m, kd}, ragged_rows(rng, m, kd, 1.0f));
  Pair wd = twin.floats({n, kd}, random_floats(rng, n * kd, -0.05f, 0.05f));
  const QuantPair w = prepare(quantize(twin, wd, n, kd, format), n);
  testing::expect_matmul_add(twin, rng, x, w, what);
}

TEST_P(CudaQuant, FusedOpsWithTheGainMatchTheUnfusedCpuOps) {
  Twin twin(dtype());
  Rng rng(23);
  const float eps = 1e-5f;
  for (const int64_t m : {1, 4, 8}) {
    expect_swiglu(twin, rng, format(), m, as_quantized, "");
    expect_matmul_add(twin, rng, format(), m, as_quantized, "");
    const int64_t k = 4096;
    Pair h = twin.floats({m, k}, ragged_rows(rng, m, k, 1.0f));
    Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));

    // qkv with RoPE and the cache write: Llama-3's heads, with a bias.
    AttentionShape shape;
    shape.num_heads = 32;
    shape.num_kv_heads = 8;
    shape.head_dim = 128;
    const int64_t nq = int64_t{32 + 2 * 8} * 128;
    Pair wq_dense = twin.floats({nq, k}, random_floats(rng, nq * k, -0.05f, 0.05f));
    testing::expect_rms_rope_cache(twin, rng, h, gain, eps,
                                   quantize(twin, wq_dense, nq, k, format()), shape, "");
  }
}

// INT8 W8A16 past the GEMV's 32 tokens on the weight-only tensor-core GEMM (IB_QUANT_GEMM;
// quant_gemm.cu) instead of the dequantized weight: tiles partly past M and N (N odd), K split
// across blocks and whole, a last stage half past K (K = 1,040); the matmul, matmul_add and the
// fused ops' fallbacks. Each call must have run it.
TEST_P(CudaQuant, W8A16TensorCoreGemmMatchesTheCpuOracle) {
  if (format() != WeightFormat::kInt8W8A16) GTEST_SKIP() << "the weight-only GEMM: W8A16 here";
  Twin twin(dtype());
  twin.gpu().set_quant_gemm_rows(1 << 20);
  Rng rng(25);
  const Shape shapes[] = {{33, 1024, 4096}, {200, 4096, 1024}, {40, 77, 1040}, {300, 1000, 256}};
  const int64_t before = twin.gpu().quant_gemm_launches();
  expect_matmul_shapes(twin, rng, shapes, format());
  const int64_t matmuls = twin.gpu().quant_gemm_launches();
  EXPECT_EQ(matmuls - before, 8) << "4 shapes, with and without a bias";
  const int64_t m = 40;
  expect_swiglu(twin, rng, format(), m, as_quantized, "gemm");
  expect_matmul_add(twin, rng, format(), m, as_quantized, "gemm");
  EXPECT_EQ(twin.gpu().quant_gemm_launches() - matmuls, 2) << "swiglu's fallback, matmul_add";
}

// Static activation scales (weight.h): INT8 W8A8 (calibration, or a checkpoint's input_scale)
// symmetric, and asymmetric with a zero point, whose correction reads the weight's row sums; FP8
// (a checkpoint's input_scale) symmetric. Scales small enough that some activations clip. The
// GEMV (1, 8 tokens), the int32 / E4M3 GEMM (33, 200) and the fused ops.
TEST_P(CudaQuant, StaticActivationScalesMatchTheCpuOracle) {
  if (!quantizes_activations(format())) GTEST_SKIP() << "W8A16 quantizes no activations";
  Twin twin(dtype());
  Rng rng(24);
  struct Static {
    float scale;
    int32_t zero_point;
    bool asymmetric;
  };
  for (const Static st :
       {Static{0.08f, 0, false}, Static{0.05f, 140, true}, Static{0.03f, 128, true}}) {
    if (st.asymmetric && format() != WeightFormat::kInt8W8A8) continue;  // int8's zero points
    const auto calibrated = [&](QuantPair w, int64_t n) {
      for (WeightRef* ref : {&w.cpu, &w.gpu}) {
        ref->input_scale = st.scale;
        ref->input_zero_point = st.zero_point;
        ref->input_asymmetric = st.asymmetric;
      }
      if (st.asymmetric) {
        const Pair sums = twin.empty(DType::kI32, {n});
        w.gpu.input_row_sums = sums.gpu;
        twin.gpu().weight_row_sums(w.gpu, sums.gpu);
        twin.cpu().weight_row_sums(w.cpu, sums.cpu);
        std::vector<int32_t> cpu_sums(static_cast<size_t>(n)), gpu_sums(cpu_sums.size());
        twin.cpu().copy_to_host(sums.cpu, cpu_sums.data());
        twin.gpu().copy_to_host(sums.gpu, gpu_sums.data());
        EXPECT_EQ(cpu_sums, gpu_sums);
      }
      return w;
    };
    const std::string what = "scale " + std::to_string(st.scale) + " zero point " +
                             std::to_string(st.zero_point) + (st.asymmetric ? " asym" : " sym");
    for (const int64_t m : {1, 8, 33, 200}) {
      const int64_t n = 1024, k = 4096;
      Pair x = twin.floats({m, k}, ragged_rows(rng, m, k, 1.0f));
      Pair dense = twin.floats({n, k}, ragged_rows(rng, n, k, 0.05f));
      Pair b = twin.floats({n}, random_floats(rng, n));
      const QuantPair w = calibrated(quantize(twin, dense, n, k, format()), n);
      Pair out = twin.output({m, n});
      twin.cpu().matmul(x.cpu, w.cpu, &b.cpu, out.cpu);
      twin.gpu().matmul(x.gpu, w.gpu, &b.gpu, out.gpu);
      ASSERT_TRUE(twin.gpu().device_status().ok()) << what;
      EXPECT_LT(twin.error(out), tolerance(dtype())) << what << " m=" << m;
    }
    for (const int64_t m : {1, 8}) {
      expect_swiglu(twin, rng, format(), m, calibrated, what);
      expect_matmul_add(twin, rng, format(), m, calibrated, what);
    }
  }
}

// IB_QUANT_TRIGGER: where the activation quantize kernel lets the GEMV or GEMM after it launch
// changes no result: the GEMV of 1 and 8 tokens, the E4M3 / int32 GEMM of 33, and the fused
// SwiGLU op (whose quantize kernel applies the norm), at triggers 1 and 2 equal to 0 bit for bit.
TEST_P(CudaQuant, QuantizeTriggerChangesNoResult) {
  if (!quantizes_activations(format())) GTEST_SKIP() << "W8A16 quantizes no activations";
  const testing::SavedSwitch guard(quant_trigger, set_quant_trigger);
  Twin twin(dtype());
  Rng rng(25);
  const int64_t n = 1024, k = 4096, f = 256;
  const Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));
  const Pair wd = twin.floats({n, k}, random_floats(rng, n * k, -0.05f, 0.05f));
  const QuantPair w = quantize(twin, wd, n, k, format());
  const Pair wgd = twin.floats({2 * f, k}, random_floats(rng, 2 * f * k, -0.05f, 0.05f));
  const QuantPair wgu = quantize(twin, wgd, 2 * f, k, format());
  for (const int64_t m : {1, 8, 33}) {
    const Pair x = twin.floats({m, k}, ragged_rows(rng, m, k, 1.0f));
    const Pair out = twin.output({m, n});
    const Pair act = twin.output({m, f});
    const auto run = [&](int where) {
      set_quant_trigger(where);
      twin.gpu().matmul(x.gpu, w.gpu, nullptr, out.gpu);
      twin.gpu().rms_matmul_swiglu(x.gpu, &gain.gpu, wgu.gpu, 1e-5f, act.gpu);
      EXPECT_TRUE(twin.gpu().device_status().ok()) << "trigger " << where;
      return std::pair{twin.gpu_floats(out.gpu), twin.gpu_floats(act.gpu)};
    };
    const auto want = run(0);
    for (const int where : {1, 2}) {
      const auto got = run(where);
      EXPECT_EQ(got.first, want.first) << "matmul m=" << m << " trigger " << where;
      EXPECT_EQ(got.second, want.second) << "swiglu m=" << m << " trigger " << where;
    }
    twin.cpu().matmul(x.cpu, w.cpu, nullptr, out.cpu);
    EXPECT_LT(twin.error(out), tolerance(dtype())) << "m=" << m;
  }
}

// IB_QUANT_SYNC: the quantized GEMVs waiting for the quantize (W8A8) or norm (W8A16, where x is
// not staged: 8 tokens) kernel before them by a flag change no result (sync_test_support.h).
TEST_P(CudaQuant, QuantizeSyncChangesNoResult) {
  Twin twin(dtype());
  Rng rng(26);
  testing::expect_quant_sync_changes_no_result(
      twin, rng,
      [&](int64_t n, int64_t k) {
        const Pair dense = twin.floats({n, k}, random_floats(rng, n * k, -0.05f, 0.05f));
        return quantize(twin, dense, n, k, format());
      },
      weight_format_name(format()));
}

TEST_P(CudaQuant, IsRefusedWithoutAHalfActivationType) {
  Twin twin(DType::kF32);
  EXPECT_FALSE(twin.gpu().supports_weight_format(format()));
  EXPECT_TRUE(twin.cpu().supports_weight_format(format()));
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, CudaQuant,
                         ::testing::Combine(::testing::Values(DType::kBF16, DType::kF16),
                                            ::testing::Values(WeightFormat::kFp8E4M3,
                                                              WeightFormat::kInt8W8A16,
                                                              WeightFormat::kInt8W8A8)),
                         [](const ::testing::TestParamInfo<QuantParam>& p) {
                           std::string name = std::string(dtype_name(std::get<0>(p.param))) + "_" +
                                              weight_format_name(std::get<1>(p.param));
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

}  // namespace
}  // namespace ib::cuda
