// The 4-bit decode GEMVs through the ring with each step's group parameters copied into shared
// memory with its weights (IB_GEMV_INT4_RING_GROUPS, gemv_kernel.cuh's kRingGroups) against the
// same GEMVs loading them into registers steps ahead. The parameters are the same values, taken
// out of the aligned 32-bit words that hold them, and the steps run in the same order, so the
// outputs must be equal bit for bit: W4A16 with groups of 128 (a shift per step), 384 (a
// division) and one group per row, where a row's groups (5, 4, 1) put a parameter at every
// position in its word, and NF4; bf16 and f16; the plain matmul, the SwiGLU, the residual add and
// the RoPE/cache forms; 1-4 tokens and 5-8 (=2); 8 and 4 warps per block (IB_GEMV_INT4_WARPS), x
// read from global memory and staged in the block (IB_GEMV_STAGE_X=2). A launch counter proves
// the form ran. The default
// form's results are checked against the CPU oracle by cuda_quant4_test.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
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
  int groups = gemv_int4_ring_groups();
  bool ring = gemv_ring();
  int warps = gemv_int4_warps();
  int stage = gemv_stage_x();
  int persist = gemv_persist_blocks_per_sm();
  ~SwitchGuard() {
    set_gemv_int4_ring_groups(groups);
    set_gemv_ring(ring);
    set_gemv_int4_warps(warps);
    set_gemv_stage_x(stage);
    set_gemv_persist_blocks_per_sm(persist);
  }
};

struct Param {
  DType dtype;
  WeightFormat format;
  const char* name;
};

class CudaGemvRingGroups : public ::testing::TestWithParam<Param> {
 protected:
  WeightFormat format() const { return GetParam().format; }
  void SetUp() override { IB_REQUIRE_CUDA(); }

  // dense (N, K) quantized on the GPU in the format's layout, W4A16 with groups of `group`.
  WeightRef quantize(Twin& twin, Rng& rng, int64_t n, int64_t k, int64_t group) {
    if (format() == WeightFormat::kNf4) return testing::quantize(twin, rng, n, k, format());
    const Pair dense = twin.floats({n, k}, random_floats(rng, n * k, -0.05f, 0.05f));
    WeightRef w;
    w.format = format();
    w.group_size = static_cast<int>(group);
    w.asymmetric = true;
    w.data = twin.empty(DType::kU8, {n, k / 2}).gpu;
    w.scales = twin.empty(DType::kF16, {n, k / group}).gpu;
    w.zeros = twin.empty(DType::kU8, {n, k / group}).gpu;
    twin.gpu().quantize_weight(dense.gpu, w);
    return w;
  }

  // The GPU floats of out after run() with the group parameters through the ring must equal
  // those with them in registers, at each warps-per-block and x-staging setting.
  template <typename F>
  void expect_same(Twin& twin, const Pair& out, const std::string& what, F run) {
    SwitchGuard guard;
    set_gemv_ring(true);
    set_gemv_persist_blocks_per_sm(0);
    for (const int warps : {8, 4}) {
      for (const int stage : {1, 2}) {
        set_gemv_int4_warps(warps);
        set_gemv_stage_x(stage);
        set_gemv_int4_ring_groups(0);
        run();
        const std::vector<float> want = twin.gpu_floats(out.gpu);
        set_gemv_int4_ring_groups(2);  // 1-4 tokens as at 1, and 5-8
        const int64_t launches = gemv_ring_groups_launches();
        run();
        const Status status = twin.gpu().device_status();
        ASSERT_TRUE(status.ok()) << what << ": " << status.error().message;
        const std::string where = what + " at " + std::to_string(warps) +
                                  " warps, IB_GEMV_STAGE_X=" + std::to_string(stage);
        EXPECT_GT(gemv_ring_groups_launches(), launches) << where << ": the form did not run";
        const std::vector<float> got = twin.gpu_floats(out.gpu);
        size_t differ = 0;
        for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i] ? 1 : 0;
        EXPECT_EQ(differ, 0u) << where;
      }
    }
  }
};

TEST_P(CudaGemvRingGroups, MatmulEqualsRegisters) {
  Twin twin(GetParam().dtype);
  Rng rng(21);
  // (m, n, k, group): 32 groups a row; 5 (K 640: fewer steps than warps, a partial row tile);
  // 4 groups of 3 steps; one group a row.
  for (const auto& [m, n, k, group] :
       {std::tuple<int64_t, int64_t, int64_t, int64_t>{1, 6144, 4096, 128},
        {3, 4100, 640, 128},
        {2, 1024, 1536, 384},
        {4, 512, 1024, 1024},
        {8, 4100, 640, 128},
        {6, 1024, 1536, 384}}) {
    const Pair x = twin.floats({m, k}, random_floats(rng, m * k, -2.0f, 2.0f));
    const Pair b = twin.floats({n}, random_floats(rng, n));
    const WeightRef w = quantize(twin, rng, n, k, group);
    const Pair out = twin.output({m, n});
    expect_same(twin, out, "matmul m=" + std::to_string(m) + " k=" + std::to_string(k),
                [&] { twin.gpu().matmul(x.gpu, w, &b.gpu, out.gpu); });
  }
}

TEST_P(CudaGemvRingGroups, FusedOpsEqualRegisters) {
  Twin twin(GetParam().dtype);
  Rng rng(22);
  const float eps = 1e-5f;
  const int64_t k = 2048;
  for (const int64_t m : {1, 4, 8}) {
    const Pair h = twin.floats({m, k}, random_floats(rng, m * k, -1.5f, 1.5f));
    const Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));

    const int64_t f = 2312;  // 289 SwiGLU tiles of 8 features, the last one partial
    const WeightRef wgu = quantize(twin, rng, 2 * f, k, 128);
    const Pair act = twin.output({m, f});
    expect_same(twin, act, "swiglu m=" + std::to_string(m),
                [&] { twin.gpu().rms_matmul_swiglu(h.gpu, &gain.gpu, wgu, eps, act.gpu); });

    const int64_t n = 4096;
    const std::vector<float> res0 = random_floats(rng, m * n);
    const WeightRef wo = quantize(twin, rng, n, k, 128);
    const Pair residual = twin.floats({m, n}, res0);
    expect_same(twin, residual, "matmul_add m=" + std::to_string(m), [&] {
      twin.gpu().copy_from_host(residual.gpu, twin.representable(res0).data(), DType::kF32);
      twin.gpu().matmul_add(h.gpu, wo, residual.gpu);
    });

    const RopeCase rc = rope_case(twin, m);
    const WeightRef wq = quantize(twin, rng, rc.nq, k, 128);
    const Pair bias = twin.floats({rc.nq}, random_floats(rng, rc.nq));
    const auto rope = [&] {
      twin.gpu().rms_matmul_rope_cache(h.gpu, &gain.gpu, wq, &bias.gpu, eps, rc.pos.gpu,
                                       rc.slot.gpu, rc.freq.gpu, rc.kv(), rc.shape, rc.qkv.gpu);
    };
    expect_same(twin, rc.qkv, "qkv m=" + std::to_string(m), rope);
    expect_same(twin, rc.kc, "k cache m=" + std::to_string(m), rope);
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaGemvRingGroups,
                         ::testing::Values(Param{DType::kBF16, WeightFormat::kInt4W4A16,
                                                 "awq_bf16"},
                                           Param{DType::kF16, WeightFormat::kInt4W4A16, "awq_f16"},
                                           Param{DType::kBF16, WeightFormat::kNf4, "nf4_bf16"},
                                           Param{DType::kF16, WeightFormat::kNf4, "nf4_f16"}),
                         [](const ::testing::TestParamInfo<Param>& p) { return p.param.name; });

}  // namespace
}  // namespace ib::cuda
