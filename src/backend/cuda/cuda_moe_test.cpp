// Differential tests of the CUDA mixture-of-experts ops against the CPU ops (backend/ops.h,
// MoeOps): routing ids and token counts exactly, routing weights within 1e-6, and the experts'
// output within the dtype's stated tolerance (detail/test_support.h: fp32 2e-5, bf16 1e-2, fp16
// 3e-3 relative L2), at 1 to 1,100 tokens (several chunks), E = 8 top-2, E = 4 top-1, E = 16
// top-4, E = 66 with rows of 8 and E = 24 with rows of 18, on the vectorized and the scalar
// kernels, eagerly and replayed from a CUDA graph.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cuda/detail/moe_kernels.h"
#include "backend/cuda/detail/quant4_test_support.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;

struct RouteCase {
  int64_t tokens, experts, top_k;
  bool renormalize;
};

// Routes t tokens over e experts (random logits, exact ties every third token at every `tie`-th
// expert) on both sides with `routing` and expects the same ids and counts and weights within
// 1e-6 times the scale.
void expect_routes_match(Twin& twin, Rng& rng, int64_t t, int64_t e, int64_t k,
                         const MoeRouting& routing, int64_t tie) {
  auto lv = random_floats(rng, t * e, -4.0f, 4.0f);
  for (int64_t i = 0; i < t; i += 3) {
    for (int64_t j = 0; j < e; j += tie) lv[static_cast<size_t>(i * e + j)] = 1.5f;
  }
  Pair logits = twin.floats({t, e}, lv, DType::kF32);
  const int64_t width = k + routing.always_on;
  Pair ids = twin.output_i32({t, width});
  Pair weights = twin.output({t, width}, DType::kF32);
  Pair counts = twin.ints<int64_t>({e}, std::vector<int64_t>(static_cast<size_t>(e), 7));
  twin.cpu().moe_ops()->moe_route_grouped(logits.cpu, routing, ids.cpu, weights.cpu, counts.cpu);
  if (routing.num_groups <= 1 && routing.scale == 1.0f && routing.always_on == 0) {  // Mixtral's
    twin.gpu().moe_route(logits.gpu, routing.renormalize, ids.gpu, weights.gpu, counts.gpu);
  } else {
    twin.gpu().moe_route_grouped(logits.gpu, routing, ids.gpu, weights.gpu, counts.gpu);
  }
  const std::string where = "T=" + std::to_string(t) + " E=" + std::to_string(e) +
                            " k=" + std::to_string(k) +
                            " groups=" + std::to_string(routing.num_groups) +
                            " always_on=" + std::to_string(routing.always_on);
  EXPECT_EQ(twin.host_ints<int32_t>(twin.gpu(), ids.gpu),
            twin.host_ints<int32_t>(twin.cpu(), ids.cpu))
      << where;
  EXPECT_EQ(twin.host_ints<int64_t>(twin.gpu(), counts.gpu),
            twin.host_ints<int64_t>(twin.cpu(), counts.cpu))
      << where;
  const auto gw = twin.gpu_floats(weights.gpu), cw = twin.cpu_floats(weights.cpu);
  for (size_t i = 0; i < gw.size(); ++i)
    ASSERT_NEAR(gw[i], cw[i], 1e-6 * routing.scale) << where << " at " << i;
}

TEST(CudaMoeRoute, MatchesTheCpuOpExactly) {
  IB_REQUIRE_CUDA();
  Twin twin(DType::kF32);
  Rng rng(21);
  for (const RouteCase rc :
       {RouteCase{1, 8, 2, true}, RouteCase{64, 8, 2, true}, RouteCase{37, 4, 1, true},
        RouteCase{300, 16, 4, false}, RouteCase{5, 64, 6, true}, RouteCase{64, 8, 8, false}}) {
    MoeRouting routing;
    routing.renormalize = rc.renormalize;
    expect_routes_match(twin, rng, rc.tokens, rc.experts, rc.top_k, routing, 2);
  }
}

// DeepSeek's options: group-limited routing (V2: 8 groups, 3 kept), routed_scaling_factor, with
// and without renormalisation; exact ties within and across groups.
TEST(CudaMoeRoute, GroupedMatchesTheCpuOpExactly) {
  IB_REQUIRE_CUDA();
  Twin twin(DType::kF32);
  Rng rng(23);
  struct GroupedCase {
    int64_t tokens, experts, top_k;
    int groups, kept;
    float scale;
    bool renormalize;
  };
  for (const GroupedCase gc :
       {GroupedCase{40, 64, 6, 8, 3, 2.5f, false}, GroupedCase{33, 16, 4, 4, 2, 1.0f, true},
        GroupedCase{9, 8, 2, 2, 1, 16.0f, true}}) {
    MoeRouting routing;
    routing.renormalize = gc.renormalize;
    routing.num_groups = gc.groups;
    routing.topk_groups = gc.kept;
    routing.scale = gc.scale;
    expect_routes_match(twin, rng, gc.tokens, gc.experts, gc.top_k, routing, 3);
  }
}

// DeepSeek's shared experts as always-on experts (MoeRouting::always_on): the columns after the
// top-k (ids E, E + 1, weight 1.0, uncounted), with V2-Lite's router (64 experts, top-6, 2
// shared) and V2's (group-limited, scaled).
TEST(CudaMoeRoute, AlwaysOnColumnsMatchTheCpuOp) {
  IB_REQUIRE_CUDA();
  Twin twin(DType::kF32);
  Rng rng(29);
  MoeRouting lite;
  lite.renormalize = false;
  lite.always_on = 2;
  expect_routes_match(twin, rng, 70, 64, 6, lite, 5);
  MoeRouting v2 = lite;
  v2.num_groups = 8;
  v2.topk_groups = 3;
  v2.scale = 16.0f;
  expect_routes_match(twin, rng, 13, 160, 6, v2, 7);
  twin.gpu().set_moe_pdl(true);  // IB_MOE_PDL: the same through programmatic dependent launch
  expect_routes_match(twin, rng, 13, 160, 6, v2, 7);
  twin.gpu().set_moe_pdl(false);
}

struct ExpertsCase {
  int64_t tokens, experts, top_k, hidden, inter;
};

// Experts of random weights on both sides, k distinct random experts per token with random
// routing weights.
struct ExpertsInputs {
  Pair x, ids, weights;
  std::vector<Pair> gu_t, dn_t;
  std::vector<WeightRef> gu_cpu, gu_gpu, dn_cpu, dn_gpu;
};

ExpertsInputs experts_inputs(Twin& twin, const ExpertsCase& ec, Rng& rng) {
  const int64_t t = ec.tokens, e = ec.experts, k = ec.top_k, d = ec.hidden, f = ec.inter;
  ExpertsInputs in{twin.floats({t, d}, random_floats(rng, t * d)), {}, {}, {}, {}, {}, {}, {}, {}};
  const auto sd = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)));
  const auto sf = static_cast<float>(1.0 / std::sqrt(static_cast<double>(f)));
  for (int64_t i = 0; i < e; ++i) {
    in.gu_t.push_back(twin.floats({2 * f, d}, random_floats(rng, 2 * f * d, -2 * sd, 2 * sd)));
    in.dn_t.push_back(twin.floats({d, f}, random_floats(rng, d * f, -2 * sf, 2 * sf)));
  }
  for (int64_t i = 0; i < e; ++i) {
    const auto u = static_cast<size_t>(i);
    in.gu_cpu.emplace_back().data = in.gu_t[u].cpu;
    in.gu_gpu.emplace_back().data = in.gu_t[u].gpu;
    in.dn_cpu.emplace_back().data = in.dn_t[u].cpu;
    in.dn_gpu.emplace_back().data = in.dn_t[u].gpu;
  }
  std::vector<int32_t> idv;
  std::vector<float> wv;
  std::vector<int32_t> order(static_cast<size_t>(e));
  for (int64_t i = 0; i < t; ++i) {
    std::iota(order.begin(), order.end(), 0);
    for (int64_t j = e - 1; j > 0; --j)
      std::swap(order[static_cast<size_t>(j)], order[static_cast<size_t>(rng.uniform_int(0, j))]);
    for (int64_t j = 0; j < k; ++j) {
      idv.push_back(order[static_cast<size_t>(j)]);
      wv.push_back(0.1f + static_cast<float>(rng.uniform()));
    }
  }
  in.ids = twin.ints<int32_t>({t, k}, idv);
  in.weights = twin.floats({t, k}, wv, DType::kF32);
  return in;
}

// The GPU's moe_experts into out (NaN first), eagerly or captured in a graph and replayed.
void run_gpu_experts(Twin& twin, bool graph, const Pair& x, const Pair& ids, const Pair& weights,
                     const std::vector<WeightRef>& gu, const std::vector<WeightRef>& dn,
                     const Pair& out) {
  twin.gpu().fill_constant(out.gpu, NAN);
  if (graph) {
    twin.gpu().set_debug_sync(false);
    ASSERT_TRUE(twin.gpu().begin_capture().ok());
    twin.gpu().moe_experts(x.gpu, ids.gpu, weights.gpu, gu, dn, out.gpu);
    auto g = twin.gpu().end_capture();
    ASSERT_TRUE(g.ok()) << g.error().message;
    (*g)->replay();
    twin.gpu().synchronize();
    twin.gpu().set_debug_sync(true);
  } else {
    twin.gpu().moe_experts(x.gpu, ids.gpu, weights.gpu, gu, dn, out.gpu);
  }
  ASSERT_TRUE(twin.gpu().device_status().ok()) << twin.gpu().device_status().error().message;
}

// The same op on the CPU and the GPU (captured in a graph when `graph`).
void expect_experts_match(Twin& twin, const ExpertsCase& ec, uint64_t seed, bool graph) {
  const int64_t t = ec.tokens, e = ec.experts, k = ec.top_k, d = ec.hidden, f = ec.inter;
  Rng rng(seed);
  ExpertsInputs in = experts_inputs(twin, ec, rng);
  const Pair &x = in.x, &ids = in.ids, &weights = in.weights;
  const auto &gu_cpu = in.gu_cpu, &gu_gpu = in.gu_gpu, &dn_cpu = in.dn_cpu, &dn_gpu = in.dn_gpu;
  Pair out = twin.output({t, d});
  twin.cpu().moe_ops()->moe_experts(x.cpu, ids.cpu, weights.cpu, gu_cpu, dn_cpu, out.cpu);
  // The warp-per-row kernels (IB_MOE_TILES=0 IB_MOE_BALANCE=0 IB_MOE_GEMM=0), then the tile
  // kernels for every chunk, with the same blocks per expert slot (IB_MOE_TILES), in tiles of 16
  // rows and a pair a pass (IB_MOE_WIDE: experts with several pairs take several passes) and
  // balanced over the device (IB_MOE_BALANCE), the balanced items a warp each (IB_MOE_WARPS, in
  // registers and, for chunks of up to 8 tokens, through a ring: IB_MOE_WARP_RING), and
  // the grouped GEMM for every call (IB_MOE_GEMM=1; fp32 and unaligned shapes fall back to a warp
  // per row); each launched plainly and with programmatic dependent launch (IB_MOE_PDL).
  struct Form {
    int64_t wide_tokens;
    int64_t tile_tokens;
    int64_t balance_tokens;
    bool pdl;
    const char* name;
    int64_t gemm_tokens = 0;
    int64_t warp_tokens = 0;
    bool warp_ring = false;
  };
  constexpr int64_t kAll = int64_t{1} << 20;
  const int64_t saved_gemm_tokens = twin.gpu().moe_gemm_tokens();
  const int64_t saved_warp_tokens = twin.gpu().moe_warp_tokens();
  for (const Form form :
       {Form{0, 0, 0, false, "warp per row"}, Form{0, kAll, 0, false, "tiles"},
        Form{kAll, 0, 0, false, "wide tiles"}, Form{0, 0, kAll, false, "balanced tiles"},
        Form{0, 0, 0, false, "grouped GEMM", 1}, Form{0, 0, 0, false, "warp items", 0, kAll},
        Form{0, 0, 0, false, "warp items, ring", 0, kAll, true},
        Form{0, 0, 0, true, "warp per row, PDL"}, Form{0, 0, 0, true, "warp items, PDL", 0, kAll},
        Form{0, 0, 0, true, "warp items, ring, PDL", 0, kAll, true},
        Form{0, kAll, 0, true, "tiles, PDL"}, Form{kAll, 0, 0, true, "wide tiles, PDL"},
        Form{0, 0, kAll, true, "balanced tiles, PDL"},
        Form{0, 0, 0, true, "grouped GEMM, PDL", 1}}) {
    twin.gpu().set_moe_wide_tokens(form.wide_tokens);
    twin.gpu().set_moe_tile_tokens(form.tile_tokens);
    twin.gpu().set_moe_balance_tokens(form.balance_tokens);
    twin.gpu().set_moe_gemm_tokens(form.gemm_tokens);
    twin.gpu().set_moe_warp_tokens(form.warp_tokens);
    twin.gpu().set_moe_warp_ring(form.warp_ring);
    twin.gpu().set_moe_pdl(form.pdl);
    twin.gpu().poison_workspace();  // neither form may read the other's scratch
    const int64_t gemm_before = twin.gpu().moe_gemm_launches();
    run_gpu_experts(twin, graph, x, ids, weights, gu_gpu, dn_gpu, out);
    // The GEMM form runs the GEMM wherever it takes the shapes (16-bit, D and F multiples of 8).
    const bool takes = twin.dtype() != DType::kF32 && d % 8 == 0 && f % 8 == 0;
    EXPECT_EQ(twin.gpu().moe_gemm_launches() > gemm_before, form.gemm_tokens > 0 && takes)
        << form.name << " T=" << t << " D=" << d << " F=" << f;
    EXPECT_LT(twin.error(out), tolerance(twin.dtype()))
        << "T=" << t << " E=" << e << " k=" << k << " D=" << d << " F=" << f
        << (graph ? " (graph)" : "") << " " << form.name;
  }
  twin.gpu().set_moe_pdl(false);
  twin.gpu().set_moe_gemm_tokens(saved_gemm_tokens);
  twin.gpu().set_moe_warp_tokens(saved_warp_tokens);
  twin.gpu().set_moe_warp_ring(false);
}

// moe_experts_add_rms_norm (IB_MOE_ADD_NORM) against the CPU's moe_experts then add_rms_norm,
// and bit for bit against the GPU's two ops; normed written over x as Mixtral's layers do.
void expect_experts_add_norm_match(Twin& twin, const ExpertsCase& ec, uint64_t seed) {
  const int64_t t = ec.tokens, d = ec.hidden;
  Rng rng(seed);
  ExpertsInputs in = experts_inputs(twin, ec, rng);
  const auto rv = random_floats(rng, t * d, -3, 3);
  Pair gain = twin.floats({d}, random_floats(rng, d, 0.5f, 1.5f));
  Pair out = twin.output({t, d});
  Pair res = twin.floats({t, d}, rv);
  Pair normed = twin.output({t, d});
  twin.cpu().moe_ops()->moe_experts(in.x.cpu, in.ids.cpu, in.weights.cpu, in.gu_cpu, in.dn_cpu,
                                    out.cpu);
  twin.cpu().add_rms_norm(res.cpu, out.cpu, gain.cpu, 1e-5f, normed.cpu);
  // The GPU's two ops, then the one op on a fresh residual with normed over x.
  twin.gpu().moe_experts(in.x.gpu, in.ids.gpu, in.weights.gpu, in.gu_gpu, in.dn_gpu, out.gpu);
  twin.gpu().add_rms_norm(res.gpu, out.gpu, gain.gpu, 1e-5f, normed.gpu);
  const std::vector<float> two_res = twin.gpu_floats(res.gpu),
                           two_normed = twin.gpu_floats(normed.gpu);
  Pair res1 = twin.floats({t, d}, rv);
  twin.gpu().moe_experts_add_rms_norm(in.x.gpu, in.ids.gpu, in.weights.gpu, in.gu_gpu, in.dn_gpu,
                                      res1.gpu, gain.gpu, 1e-5f, in.x.gpu);
  ASSERT_TRUE(twin.gpu().device_status().ok()) << twin.gpu().device_status().error().message;
  const std::string where = "T=" + std::to_string(t) + " E=" + std::to_string(ec.experts) +
                            " k=" + std::to_string(ec.top_k) + " D=" + std::to_string(d);
  EXPECT_LT(twin.error(res), tolerance(twin.dtype())) << "residual " << where;
  EXPECT_LT(twin.error(normed), tolerance(twin.dtype())) << "normed " << where;
  EXPECT_EQ(twin.gpu_floats(res1.gpu), two_res) << "residual " << where;
  EXPECT_EQ(twin.gpu_floats(in.x.gpu), two_normed) << "normed " << where;
}

class CudaMoeExperts : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

TEST_P(CudaMoeExperts, MatchesTheCpuOp) {
  Twin twin(GetParam());
  uint64_t seed = 100;
  for (const int64_t t : {1, 2, 7, 64}) {
    expect_experts_match(twin, {t, 8, 2, 128, 96}, ++seed, false);
    expect_experts_match(twin, {t, 4, 1, 64, 64}, ++seed, false);
  }
  expect_experts_match(twin, {33, 16, 4, 256, 160}, ++seed, false);
  // DeepSeek-V2's row of 6 + 2 always-on, and a row wider than the combine keeps in registers.
  expect_experts_match(twin, {9, 66, 8, 128, 64}, ++seed, false);
  expect_experts_match(twin, {5, 24, 18, 64, 32}, ++seed, false);
  // DeepSeek-V2-Lite's routing at the seed protocol's 8 tokens, K not a multiple of a warp's
  // 32 vectors (F 176: 22 vectors in bf16).
  expect_experts_match(twin, {8, 64, 6, 256, 176}, ++seed, false);
  // More than 4 pairs an expert in a chunk of at most 8 tokens: the ring form's second pass (every
  // token routes to both experts, 6 and 8 pairs each).
  expect_experts_match(twin, {6, 2, 2, 64, 40}, ++seed, false);
  expect_experts_match(twin, {8, 2, 2, 128, 96}, ++seed, true);
}

// The grouped GEMM's tiles: experts with more pairs than a 64-row tile (several tiles, the last
// padded), K over several pipeline stages with a partial last one (D 200, F 136), F past one
// block's 64 features with a partial block, D past one block's 128 outputs, and 64 experts top-6
// (DeepSeek-V2-Lite's routing) where most tiles are mostly padding.
TEST_P(CudaMoeExperts, GroupedGemmTiles) {
  Twin twin(GetParam());
  expect_experts_match(twin, {300, 4, 1, 256, 192}, 21, false);
  expect_experts_match(twin, {160, 8, 2, 200, 136}, 22, false);
  expect_experts_match(twin, {48, 64, 6, 320, 96}, 23, false);
  expect_experts_match(twin, {40, 8, 2, 128, 96}, 24, true);
}

TEST_P(CudaMoeExperts, ScalarKernelsOnUnalignedSizes) {
  Twin twin(GetParam());
  // D and F not multiples of a 16-byte vector in any dtype.
  expect_experts_match(twin, {1, 8, 2, 30, 18}, 7, false);
  expect_experts_match(twin, {19, 4, 1, 30, 18}, 8, false);
}

TEST_P(CudaMoeExperts, SeveralChunksOfTokens) {
  Twin twin(GetParam());
  // 1,100 tokens x top-2 = 2,200 pairs: more than one chunk's pair list.
  expect_experts_match(twin, {1100, 8, 2, 64, 64}, 9, false);
}

TEST_P(CudaMoeExperts, ReplaysFromACudaGraph) {
  Twin twin(GetParam());
  expect_experts_match(twin, {1, 8, 2, 128, 96}, 11, true);
  expect_experts_match(twin, {8, 8, 2, 128, 96}, 12, true);
}

// The one kernel a token at rows of 1, 2 and 4 vectors a thread (D 512, 4,096 = Mixtral's, and
// 8,192 in bf16; f32 rows take twice the vectors); the combine and the norm kernel where it does
// not fit: D not a whole vector (30), 18 slots a row.
TEST_P(CudaMoeExperts, AddRmsNormInOneKernel) {
  Twin twin(GetParam());
  uint64_t seed = 300;
  for (const int64_t t : {1, 3}) {
    expect_experts_add_norm_match(twin, {t, 8, 2, 512, 64}, ++seed);
    expect_experts_add_norm_match(twin, {t, 8, 2, 4096, 32}, ++seed);
  }
  expect_experts_add_norm_match(twin, {2, 8, 2, 8192, 16}, ++seed);
  expect_experts_add_norm_match(twin, {2, 66, 8, 256, 32}, ++seed);
  expect_experts_add_norm_match(twin, {3, 8, 2, 30, 18}, ++seed);
  expect_experts_add_norm_match(twin, {2, 24, 18, 64, 32}, ++seed);
}

// 4-bit experts (kInt4W4A16: AWQ / GPTQ; moe_int4.cu) against the CPU op on their values
// dequantized as backend/weight.h defines them (dense fp32): random codes, f16 scales and zero
// points, groups of 128, 256 and one a row; 1 to 1,100 tokens (several passes of 8 pairs an
// expert, several chunks), plainly, under PDL and replayed from a graph, in the register form,
// the ring form (IB_MOE_INT4_RING; 1-8 tokens, where a warp's steps of several tiles and empty
// steps past K (D = 128: 1 step for 8 warps) meet the ring) and the grouped GEMM (moe_gemm.cu). The
// tolerance is the dtype's: the GPU rounds x, g, u and act to it.
void expect_int4_experts_match(Twin& twin, const ExpertsCase& ec, int group, uint64_t seed,
                               bool graph) {
  const int64_t t = ec.tokens, e = ec.experts, k = ec.top_k, d = ec.hidden, f = ec.inter;
  Rng rng(seed);
  ExpertsInputs in = experts_inputs(twin, {t, e, k, 128, 128}, rng);  // x, ids and weights
  in.x = twin.floats({t, d}, random_floats(rng, t * d));
  const testing::Variant v{WeightFormat::kInt4W4A16, group, false};
  std::vector<WeightRef> gu_cpu, gu_gpu, dn_cpu, dn_gpu;
  for (int64_t i = 0; i < e; ++i) {
    const testing::Weight4 gu = testing::make_weight(twin, rng, 2 * f, d, v);
    const testing::Weight4 dn = testing::make_weight(twin, rng, d, f, v);
    gu_cpu.push_back(gu.cpu);
    gu_gpu.push_back(gu.gpu);
    dn_cpu.push_back(dn.cpu);
    dn_gpu.push_back(dn.gpu);
  }
  Pair out = twin.output({t, d});
  twin.cpu().moe_ops()->moe_experts(in.x.cpu, in.ids.cpu, in.weights.cpu, gu_cpu, dn_cpu, out.cpu);
  // The register form, then the ring form (IB_MOE_INT4_RING: chunks of <= 8 tokens), each
  // plainly and under PDL; the ring form's steps are the register form's in the same order, so
  // its output is the same bit for bit.
  std::vector<float> register_form;
  const int64_t saved_gemm_tokens = twin.gpu().moe_gemm_tokens();
  twin.gpu().set_moe_gemm_tokens(0);  // the register and ring forms, not the grouped GEMM
  for (const bool ring : {false, true}) {
    for (const bool pdl : {false, true}) {
      twin.gpu().set_moe_int4_ring(ring);
      twin.gpu().set_moe_pdl(pdl);
      twin.gpu().poison_workspace();
      run_gpu_experts(twin, graph, in.x, in.ids, in.weights, gu_gpu, dn_gpu, out);
      const std::string where = "T=" + std::to_string(t) + " E=" + std::to_string(e) +
                                " k=" + std::to_string(k) + " D=" + std::to_string(d) +
                                " F=" + std::to_string(f) + " group=" + std::to_string(group) +
                                (graph ? " (graph)" : "") + (pdl ? " PDL" : "") +
                                (ring ? " ring" : "");
      EXPECT_LT(twin.error(out), tolerance(twin.dtype())) << where;
      if (!ring && !pdl) register_form = twin.gpu_floats(out.gpu);
      if (ring) {
        EXPECT_EQ(twin.gpu_floats(out.gpu), register_form) << where;
      }
    }
  }
  twin.gpu().set_moe_int4_ring(false);
  // The grouped GEMM for every call (IB_MOE_GEMM=1; fp32 keeps the 4-bit kernels), plainly and
  // under PDL: each stage's codes turned into the dtype in shared memory, (q - z) * s rounded once.
  for (const bool pdl : {false, true}) {
    twin.gpu().set_moe_gemm_tokens(1);
    twin.gpu().set_moe_pdl(pdl);
    twin.gpu().poison_workspace();
    const int64_t gemm_before = twin.gpu().moe_gemm_launches();
    run_gpu_experts(twin, graph, in.x, in.ids, in.weights, gu_gpu, dn_gpu, out);
    EXPECT_EQ(twin.gpu().moe_gemm_launches() > gemm_before, twin.dtype() != DType::kF32);
    EXPECT_LT(twin.error(out), tolerance(twin.dtype()))
        << "grouped GEMM T=" << t << " E=" << e << " k=" << k << " D=" << d << " F=" << f
        << " group=" << group << (graph ? " (graph)" : "") << (pdl ? " PDL" : "");
  }
  twin.gpu().set_moe_gemm_tokens(saved_gemm_tokens);
  twin.gpu().set_moe_pdl(false);
}

TEST_P(CudaMoeExperts, FourBitExpertsMatchTheirDequantizedValues) {
  Twin twin(GetParam());
  if (!twin.gpu().supports_weight_format(WeightFormat::kInt4W4A16))
    GTEST_SKIP() << "W4A16 runs in bf16 / fp16 on this GPU";
  QuantizedExperts q{WeightFormat::kInt4W4A16, 128, false, 256, 384};
  EXPECT_TRUE(twin.gpu().runs_quantized_experts(q));
  q.group_size = 64;  // a 4-bit step (128 k) spans two groups
  EXPECT_FALSE(twin.gpu().runs_quantized_experts(q));
  q.group_size = 128;
  q.act_order = true;
  EXPECT_FALSE(twin.gpu().runs_quantized_experts(q));
  EXPECT_FALSE(twin.gpu().runs_quantized_experts({WeightFormat::kInt8W8A16, 0, false, 256, 384}));
  uint64_t seed = 500;
  for (const int64_t t : {1, 2, 8, 64})
    expect_int4_experts_match(twin, {t, 8, 2, 256, 384}, 128, ++seed, false);
  expect_int4_experts_match(twin, {5, 4, 1, 512, 256}, 256, ++seed, false);
  expect_int4_experts_match(twin, {3, 8, 2, 384, 256}, 0, ++seed, false);  // one group a row
  expect_int4_experts_match(twin, {9, 16, 4, 128, 128}, 128, ++seed, false);
  expect_int4_experts_match(twin, {1100, 8, 2, 128, 128}, 128, ++seed, false);  // 2 chunks
  // Experts of several 64-row tiles, F past one block's 64 features: the grouped GEMM's tiles.
  expect_int4_experts_match(twin, {200, 4, 1, 256, 384}, 128, ++seed, false);
  expect_int4_experts_match(twin, {1, 8, 2, 256, 384}, 128, ++seed, true);
  expect_int4_experts_match(twin, {8, 8, 2, 256, 384}, 128, ++seed, true);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaMoeExperts,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         testing::dtype_param_name);

}  // namespace
}  // namespace ib::cuda
