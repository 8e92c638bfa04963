// The quantized decode GEMVs of one token with x in each block's shared memory (gemv_kernel.cuh's
// kXShared) against the same GEMVs reading x from global memory: IB_GEMV_STAGE_X (every format:
// x, or the W8A8 formats' codes from the quantize kernel, copied in) and IB_GEMV_FUSE_QUANT (FP8,
// INT8 W8A8: x quantized in the block, no quantize kernel) and IB_GEMV_STAGE_NORM (INT8 W8A16 and
// the 4-bit formats: x normalised in the block, no norm kernel). The block quantizes with the
// quantize kernel's arithmetic in its order (detail/quant_row.cuh), normalises with the norm
// kernel's (detail/norm_row.cuh), and the steps are the same in the same order, so the outputs
// must be equal bit for bit: the plain matmul (K of 4,096 and of 14,336,
// the down projection's, and a small one), the residual add, the SwiGLU and the RoPE/cache forms,
// W8A8's dynamic and static activation scales (INT8's asymmetric one with the weight's row sums),
// one block per tile and a persistent grid (each against the same grid with x from global
// memory), and the W4A16 ring's 4-warp blocks (its gate/up launches). The default form's results
// are checked against the CPU oracle by cuda_quant_test and cuda_quant4_test.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cuda/detail/gemv_test_support.h"
#include "backend/cuda/detail/gemv_x_shared.h"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::rope_case;
using testing::RopeCase;
using testing::Twin;

// Resets the process-wide switches whatever a test does.
struct SwitchGuard {
  bool fuse = gemv_fuse_quant();
  int stage = gemv_stage_x();
  int persist = gemv_persist_blocks_per_sm();
  bool norm = gemv_stage_norm();
  ~SwitchGuard() {
    set_gemv_stage_norm(norm);
    set_gemv_fuse_quant(fuse);
    set_gemv_stage_x(stage);
    set_gemv_persist_blocks_per_sm(persist);
  }
};

// The activation quantization of a W8A8 case: dynamic per token (scale 0) or static.
struct ActScale {
  float scale;
  int32_t zero_point;
  bool asymmetric;
  std::string name() const {
    return scale == 0.0f ? "dynamic"
                         : "static " + std::to_string(scale) + (asymmetric ? " asym" : " sym");
  }
};

struct Param {
  DType dtype;
  WeightFormat format;
};

bool w8a8(WeightFormat f) {
  return f == WeightFormat::kFp8E4M3 || f == WeightFormat::kInt8W8A8;
}

class CudaGemvXShared : public ::testing::TestWithParam<Param> {
 protected:
  WeightFormat format() const { return GetParam().format; }
  void SetUp() override {
    IB_REQUIRE_CUDA();
    Twin probe(GetParam().dtype);
    if (!probe.gpu().supports_weight_format(format()))
      GTEST_SKIP() << "this GPU lacks the format's tensor cores";
  }
  // The format's forms: 0 x from global memory; 1 staged (IB_GEMV_STAGE_X=2, every format); 2
  // W8A8 quantized in the block (IB_GEMV_FUSE_QUANT); 3 the others staged and normalised in the
  // block where the op has a norm (IB_GEMV_STAGE_NORM).
  std::vector<int> forms() const {
    return w8a8(format()) ? std::vector<int>{1, 2} : std::vector<int>{1, 3};
  }
  static void set_form(int form) {
    set_gemv_stage_x(form == 1 || form == 3 ? 2 : 0);
    set_gemv_fuse_quant(form == 2);
    set_gemv_stage_norm(form == 3);
  }
  // The activation scales a case runs: W8A8's dynamic and static ones, else none.
  std::vector<ActScale> act_scales() const {
    if (!w8a8(format())) return {{0.0f, 0, false}};
    std::vector<ActScale> out = {{0.0f, 0, false}, {0.04f, 0, false}};
    if (format() == WeightFormat::kInt8W8A8) out.push_back({0.03f, 140, true});
    return out;
  }
  // dense (N, K) quantized on the GPU, with the activation scale of `act` (W8A8).
  WeightRef quantize(Twin& twin, Rng& rng, int64_t n, int64_t k, const ActScale& act) const {
    WeightRef w = testing::quantize(twin, rng, n, k, format());
    w.input_scale = act.scale;
    w.input_zero_point = act.zero_point;
    w.input_asymmetric = act.asymmetric;
    if (act.asymmetric) {
      w.input_row_sums = twin.empty(DType::kI32, {n}).gpu;
      twin.gpu().weight_row_sums(w, w.input_row_sums);
    }
    return w;
  }

  // out after run() with x in shared memory in each form (one block per tile, and on a
  // persistent grid of 2 blocks per SM) must equal out with x read from global memory on the same
  // grid, and the form must have run.
  // normed: the op normalises x (form 3 must then have done so in the block).
  template <typename F>
  void expect_same(Twin& twin, const Pair& out, const std::string& what, F run,
                   bool normed = false) const {
    SwitchGuard guard;
    for (const int per_sm : {0, 2}) {
      set_gemv_persist_blocks_per_sm(per_sm);
      set_form(0);
      const int64_t before = gemv_x_shared_launches();
      run();
      ASSERT_EQ(gemv_x_shared_launches(), before) << what << ": x in shared memory, switches off";
      const std::vector<float> want = twin.gpu_floats(out.gpu);
      for (const int form : forms()) {
        set_form(form);
        const int64_t launches = gemv_x_shared_launches();
        const int64_t norm_launches = gemv_x_norm_launches();
        run();
        const Status status = twin.gpu().device_status();
        ASSERT_TRUE(status.ok()) << what << ": " << status.error().message;
        EXPECT_GT(gemv_x_shared_launches(), launches)
            << what << ": form " << form << " did not run";
        EXPECT_EQ(gemv_x_norm_launches() > norm_launches, form == 3 && normed)
            << what << ": form " << form << ", x normalised in the block";
        const std::vector<float> got = twin.gpu_floats(out.gpu);
        size_t differ = 0, written = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          differ += got[i] != want[i] && !(std::isnan(got[i]) && std::isnan(want[i])) ? 1 : 0;
          written += std::isnan(want[i]) ? 0 : 1;
        }
        EXPECT_EQ(differ, 0u) << what << ", form " << form << ", " << per_sm
                              << " persistent blocks per SM";
        EXPECT_GT(written, 0u) << what << ": nothing written";
      }
    }
  }
};

TEST_P(CudaGemvXShared, MatmulEqualsXFromGlobalMemory) {
  Twin twin(GetParam().dtype);
  Rng rng(31);
  for (const ActScale& act : act_scales()) {
    for (const auto& [n, k] :
         {std::pair<int64_t, int64_t>{6144, 4096}, {4096, 14336}, {500, 640}}) {
      if (k % 128 != 0 && is_4bit(format())) continue;  // the 4-bit groups of 128
      const Pair x = twin.floats({1, k}, random_floats(rng, k, -2.0f, 2.0f));
      const Pair b = twin.floats({n}, random_floats(rng, n));
      const WeightRef w = quantize(twin, rng, n, k, act);
      const Pair out = twin.output({1, n});
      expect_same(twin, out, act.name() + " matmul k=" + std::to_string(k),
                  [&] { twin.gpu().matmul(x.gpu, w, &b.gpu, out.gpu); });
    }
  }
}

TEST_P(CudaGemvXShared, FusedOpsEqualXFromGlobalMemory) {
  Twin twin(GetParam().dtype);
  Rng rng(32);
  const float eps = 1e-5f;
  const int64_t k = 2048;
  for (const ActScale& act : act_scales()) {
    const std::string what = act.name();
    const Pair h = twin.floats({1, k}, random_floats(rng, k, -1.5f, 1.5f));
    const Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));

    // 1,156 SwiGLU tiles of 8 features, the last one partial: the W4A16 ring's 4-warp blocks.
    const int64_t f = 9244;
    const WeightRef wgu = quantize(twin, rng, 2 * f, k, act);
    const Pair out = twin.output({1, f});
    expect_same(
        twin, out, what + " swiglu",
        [&] { twin.gpu().rms_matmul_swiglu(h.gpu, &gain.gpu, wgu, eps, out.gpu); }, true);

    const int64_t n = 4096;
    const std::vector<float> res0 = random_floats(rng, n);
    const WeightRef wo = quantize(twin, rng, n, k, act);
    const Pair residual = twin.floats({1, n}, res0);
    expect_same(twin, residual, what + " matmul_add", [&] {
      twin.gpu().copy_from_host(residual.gpu, twin.representable(res0).data(), DType::kF32);
      twin.gpu().matmul_add(h.gpu, wo, residual.gpu);
    });

    const RopeCase rc = rope_case(twin, 1);
    const WeightRef wq = quantize(twin, rng, rc.nq, k, act);
    const Pair bias = twin.floats({rc.nq}, random_floats(rng, rc.nq));
    const auto rope = [&] {
      twin.gpu().rms_matmul_rope_cache(h.gpu, &gain.gpu, wq, &bias.gpu, eps, rc.pos.gpu,
                                       rc.slot.gpu, rc.freq.gpu, rc.kv(), rc.shape, rc.qkv.gpu);
    };
    expect_same(twin, rc.qkv, what + " qkv", rope, true);
    expect_same(twin, rc.kc, what + " k cache", rope, true);
  }
}

// Two tokens keep x in global memory (and W8A8 its quantize kernel): the form is one token's.
TEST_P(CudaGemvXShared, TwoTokensKeepXInGlobalMemory) {
  SwitchGuard guard;
  Twin twin(GetParam().dtype);
  Rng rng(33);
  const int64_t n = 1024, k = 1024;
  const Pair x = twin.floats({2, k}, random_floats(rng, 2 * k, -2.0f, 2.0f));
  const WeightRef w = quantize(twin, rng, n, k, ActScale{0.0f, 0, false});
  const Pair out = twin.output({2, n});
  for (const int form : forms()) {
    set_form(form);
    const int64_t before = gemv_x_shared_launches();
    twin.gpu().matmul(x.gpu, w, nullptr, out.gpu);
    ASSERT_TRUE(twin.gpu().device_status().ok());
    EXPECT_EQ(gemv_x_shared_launches(), before) << "form " << form;
  }
}

std::string param_name(const ::testing::TestParamInfo<Param>& info) {
  std::string f = weight_format_name(info.param.format);
  for (char& c : f) c = c == '-' ? '_' : c;
  return std::string(info.param.dtype == DType::kBF16 ? "bf16_" : "f16_") + f;
}

INSTANTIATE_TEST_SUITE_P(QuantizedFormats, CudaGemvXShared,
                         ::testing::Values(Param{DType::kBF16, WeightFormat::kFp8E4M3},
                                           Param{DType::kF16, WeightFormat::kFp8E4M3},
                                           Param{DType::kBF16, WeightFormat::kInt8W8A8},
                                           Param{DType::kF16, WeightFormat::kInt8W8A8},
                                           Param{DType::kBF16, WeightFormat::kInt8W8A16},
                                           Param{DType::kBF16, WeightFormat::kInt4W4A16},
                                           Param{DType::kF16, WeightFormat::kInt4W4A16},
                                           Param{DType::kBF16, WeightFormat::kNf4}),
                         param_name);

}  // namespace
}  // namespace ib::cuda
