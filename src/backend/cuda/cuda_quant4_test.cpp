// Differential tests of the 4-bit formats on CUDA (backend/weight.h: kInt4W4A16, kNf4) against
// their definition: the reference side holds the weight dequantized on the host, exactly as
// weight.h defines it, as a dense fp32 weight of the CPU backend, so every CPU op is the oracle
// unchanged. Covered: matmul through the 4-bit GEMV (1-16 tokens; W4A16 with groups of 128 or
// one per row, NF4), the dequantizing path (more tokens, groups of 64, act-order), the tensor-core
// GEMM that replaces it (IB_QUANT_GEMM), the fused decode ops (the GEMV's and the unfused
// fallback's), and the load-time quantization bit for bit.
// Tolerance: the dtype's (testing::tolerance): the GPU rounds x (and NF4's GEMV and the
// dequantizing path each weight) to bf16/fp16 once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/quant4_test_support.h"
#include "backend/cuda/detail/sync_test_support.h"
#include "backend/cuda/detail/test_support.h"
#include "core/dtype.h"

namespace ib::cuda {
namespace {

using testing::make_weight;
using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;
using testing::u32_below;
using testing::Variant;
using testing::Weight4;

using Param = std::tuple<DType, Variant>;

class CudaQuant4 : public ::testing::TestWithParam<Param> {
 protected:
  DType dtype() const { return std::get<0>(GetParam()); }
  const Variant& variant() const { return std::get<1>(GetParam()); }
  void SetUp() override {
    IB_REQUIRE_CUDA();
    Twin probe(dtype());
    if (!probe.gpu().supports_weight_format(variant().format))
      GTEST_SKIP() << "this GPU lacks the bf16/fp16 MMAs of " << variant().name();
  }
};

// 1-16 tokens take the W4A16 GEMV where the groups allow it, more the dequantizing path
// (IB_QUANT_GEMM=0 here; TensorCoreGemmMatchesTheDefinition takes the GEMM); N not a multiple of
// 16 on the small K.
TEST_P(CudaQuant4, MatmulMatchesTheDefinition) {
  Twin twin(dtype());
  twin.gpu().set_quant_gemm_rows(0);
  Rng rng(41);
  testing::expect_matmuls(
      twin, rng,
      {{1, 6144, 4096},
       {3, 1000, 256},
       {8, 4096, 4096},
       {16, 512, 1024},
       {17, 384, 512},
       {64, 1024, 4096},
       {1, 3, 256}},
      [&](int64_t n, int64_t k) {
        const Weight4 w = make_weight(twin, rng, n, k, variant());
        return testing::WeightPair{w.cpu, w.gpu};
      },
      variant().name());
}

TEST_P(CudaQuant4, FusedOpsMatchTheUnfusedCpuOps) {
  Twin twin(dtype());
  twin.gpu().set_quant_gemm_rows(0);  // the fallbacks past the GEMV dequantize
  Rng rng(42);
  const auto weight = [&](int64_t n) {
    const Weight4 w = make_weight(twin, rng, n, 4096, variant());
    return testing::WeightPair{w.cpu, w.gpu};
  };
  testing::expect_fused_ops(twin, rng, weight, variant().name());
}

// IB_QUANT_SYNC: the 4-bit GEMVs waiting for the norm kernel before them by a flag change no
// result (sync_test_support.h).
TEST_P(CudaQuant4, QuantizeSyncChangesNoResult) {
  Twin twin(dtype());
  Rng rng(44);
  testing::expect_quant_sync_changes_no_result(
      twin, rng,
      [&](int64_t n, int64_t k) {
        const Weight4 w = make_weight(twin, rng, n, k, variant());
        return testing::WeightPair{w.cpu, w.gpu};
      },
      variant().name());
}

// The weight-only tensor-core GEMM past the GEMV (IB_QUANT_GEMM; quant_gemm.cu), set before the
// weights are made (its scratch comes with the first one): tiles partly past M and N (N odd), K
// split across blocks (grids under two blocks an SM) and whole, act-order; the matmul, then
// matmul_add and the fused ops' fallbacks past the GEMV's 16 tokens. Each call must have run it.
TEST_P(CudaQuant4, TensorCoreGemmMatchesTheDefinition) {
  Twin twin(dtype());
  twin.gpu().set_quant_gemm_rows(1 << 20);
  Rng rng(43);
  const auto weight = [&](int64_t n, int64_t k) {
    const Weight4 w = make_weight(twin, rng, n, k, variant());
    return testing::WeightPair{w.cpu, w.gpu};
  };
  const int64_t before = twin.gpu().quant_gemm_launches();
  testing::expect_matmuls(
      twin, rng,
      {{17, 384, 512}, {33, 77, 1024}, {64, 1024, 4096}, {300, 1000, 256}, {130, 130, 2048}},
      weight, variant().name() + " gemm");
  const int64_t matmuls = twin.gpu().quant_gemm_launches();
  EXPECT_EQ(matmuls - before, 10) << "5 shapes, with and without a bias";
  testing::expect_fused_ops(twin, rng, [&](int64_t n) { return weight(n, 4096); },
                            variant().name() + " gemm", 4096, {20, 40});
  EXPECT_EQ(twin.gpu().quant_gemm_launches() - matmuls, 6) << "3 fused ops' fallbacks, 2 sizes";
}

INSTANTIATE_TEST_SUITE_P(
    Formats, CudaQuant4,
    ::testing::Combine(::testing::Values(DType::kBF16, DType::kF16),
                       ::testing::Values(Variant{WeightFormat::kInt4W4A16, 128, false},
                                         Variant{WeightFormat::kInt4W4A16, 0, false},
                                         Variant{WeightFormat::kInt4W4A16, 64, false},
                                         Variant{WeightFormat::kInt4W4A16, 128, true},
                                         Variant{WeightFormat::kNf4, 64, false})),
    [](const ::testing::TestParamInfo<Param>& p) {
      return std::string(dtype_name(std::get<0>(p.param))) + "_" + std::get<1>(p.param).name();
    });

// The load-time quantization (weight.h) on the host, as the GPU's oracle.
struct Quantized4 {
  std::vector<uint8_t> codes, zeros;
  std::vector<uint16_t> scale_bits;  // kInt4W4A16
  std::vector<float> absmax;         // kNf4
};

Quantized4 quantize_on_host(const std::vector<float>& w, int64_t n, int64_t k, int group,
                            WeightFormat format, bool symmetric) {
  Quantized4 out;
  const int64_t groups = k / group;
  out.codes.assign(static_cast<size_t>(n * k / 2), 0);
  const auto put = [&](int64_t r, int64_t c, int q, bool high_first) {
    uint8_t& byte = out.codes[static_cast<size_t>(r * (k / 2) + c / 2)];
    const bool high = (c % 2 == 1) != high_first;
    byte = static_cast<uint8_t>(byte | (high ? q << 4 : q));
  };
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* v = &w[static_cast<size_t>(r * k + g * group)];
      float lo = v[0], hi = v[0], amax = 0.0f;
      for (int i = 0; i < group; ++i) {
        lo = std::min(lo, v[i]);
        hi = std::max(hi, v[i]);
        amax = std::max(amax, std::fabs(v[i]));
      }
      if (format == WeightFormat::kNf4) {
        const float a = amax > 0.0f ? amax : 1.0f;
        out.absmax.push_back(a);
        for (int i = 0; i < group; ++i) {
          int best = 0;
          for (int c = 1; c < 16; ++c)
            if (std::fabs(v[i] / a - kNf4Levels[c]) < std::fabs(v[i] / a - kNf4Levels[best]))
              best = c;
          put(r, g * group + i, best, true);
        }
        continue;
      }
      float s = symmetric ? (amax > 0.0f ? amax / 7.5f : 1.0f) : std::max(hi - lo, 1e-5f) / 15.0f;
      // (No group here has a scale that rounds to f16 zero.)
      out.scale_bits.push_back(f32_to_f16_bits(s));
      s = f16_bits_to_f32(out.scale_bits.back());
      const int z =
          symmetric ? 8 : static_cast<int>(std::clamp(std::nearbyint(-lo / s), 0.0f, 15.0f));
      out.zeros.push_back(static_cast<uint8_t>(z));
      for (int i = 0; i < group; ++i) {
        const float q = std::clamp(std::nearbyint(v[i] / s) + static_cast<float>(z), 0.0f, 15.0f);
        put(r, g * group + i, static_cast<int>(q), false);
      }
    }
  }
  return out;
}

class CudaQuant4Load : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

TEST_P(CudaQuant4Load, QuantizationMatchesTheDefinitionBitForBit) {
  Twin twin(GetParam());
  Rng rng(43);
  const int64_t n = 300, k = 1024;
  std::vector<float> values = random_floats(rng, n * k, -0.1f, 0.1f);
  for (int64_t c = 0; c < k; ++c) values[static_cast<size_t>(5 * k + c)] = 0.0f;  // a zero row
  values = twin.representable(values);  // what the GPU's dense weight holds
  const Pair dense = twin.floats({n, k}, values);
  struct Case {
    WeightFormat format;
    int group;
    bool symmetric;
  };
  for (const Case& c :
       {Case{WeightFormat::kInt4W4A16, 128, false}, Case{WeightFormat::kInt4W4A16, 128, true},
        Case{WeightFormat::kInt4W4A16, 64, false}, Case{WeightFormat::kNf4, 64, false}}) {
    const int64_t groups = k / c.group;
    const bool nf4 = c.format == WeightFormat::kNf4;
    WeightRef w;
    w.format = c.format;
    w.group_size = c.group;
    w.data = twin.empty(DType::kU8, {n, k / 2}).gpu;
    w.scales = twin.empty(nf4 ? DType::kF32 : DType::kF16, {n, groups}).gpu;
    if (!nf4) w.zeros = twin.empty(DType::kU8, {n, groups}).gpu;
    w.asymmetric = !c.symmetric;
    WeightRef cpu = w;  // the CPU backend's quantize_weight, the oracle of the engine's path
    cpu.data = twin.empty(DType::kU8, {n, k / 2}).cpu;
    cpu.scales = twin.empty(nf4 ? DType::kF32 : DType::kF16, {n, groups}).cpu;
    if (!nf4) cpu.zeros = twin.empty(DType::kU8, {n, groups}).cpu;
    twin.cpu().quantize_weight(dense.cpu, cpu);
    twin.gpu().quantize_weight(dense.gpu, w);
    const Quantized4 want = quantize_on_host(values, n, k, c.group, c.format, c.symmetric);
    const std::string what = std::string(weight_format_name(c.format)) + " g" +
                             std::to_string(c.group) + (c.symmetric ? " sym" : " asym");
    EXPECT_EQ(twin.host_ints<uint8_t>(twin.gpu(), w.data), want.codes) << what;
    EXPECT_EQ(twin.host_ints<uint8_t>(twin.cpu(), cpu.data), want.codes) << what << " (CPU)";
    if (nf4) {
      std::vector<float> absmax(static_cast<size_t>(n * groups));
      twin.gpu().copy_to_host(w.scales, absmax.data());
      EXPECT_EQ(absmax, want.absmax) << what;
      twin.cpu().copy_to_host(cpu.scales, absmax.data());
      EXPECT_EQ(absmax, want.absmax) << what << " (CPU)";
    } else {
      std::vector<uint16_t> bits(static_cast<size_t>(n * groups));
      twin.gpu().copy_to_host(w.scales, bits.data());
      EXPECT_EQ(bits, want.scale_bits) << what;
      EXPECT_EQ(twin.host_ints<uint8_t>(twin.gpu(), w.zeros), want.zeros) << what;
      twin.cpu().copy_to_host(cpu.scales, bits.data());
      EXPECT_EQ(bits, want.scale_bits) << what << " (CPU)";
      EXPECT_EQ(twin.host_ints<uint8_t>(twin.cpu(), cpu.zeros), want.zeros) << what << " (CPU)";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaQuant4Load, ::testing::Values(DType::kBF16, DType::kF16),
                         [](const ::testing::TestParamInfo<DType>& p) {
                           return std::string(dtype_name(p.param));
                         });

}  // namespace
}  // namespace ib::cuda
