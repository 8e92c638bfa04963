// Differential tests of the fused decode ops with a LoRA update (FusedDecodeOps' `lora`,
// backend/ops.h) against the unfused CPU ops they replace: rms_norm, matmul (+ bias),
// LoraOps::lora_apply_group on the matmul's output, then rope_and_cache, silu_mul or the residual
// add. Batches mix three adapter slots and the base model (-1); ranks 8, 16 and 64; dense weights
// with the gain folded (null) and an INT8 W8A16 weight keeping its gain (the shrink applies it);
// the residual add on cuBLASLt (IB_ADD_CUBLASLT: the op's unfused form, the expand its own
// launch); the shrink launched before the GEMV (IB_LORA_IN_GEMV=1), chained (3: each GEMV
// accumulating the next op's shrink, over a decode layer's ops) and met by flags (4: bit for bit
// mode 1's, over a graph replayed three times) and lookahead shrinks (5: o's and down's shrinks
// also computing the next rms op's from the lookahead matrices); eagerly
// and replayed from a CUDA graph. bf16 and fp16, the dtype's tolerance of detail/test_support.h.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;

class CudaFusedLora : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

// IB_LORA_IN_GEMV's fused modes: the shrink launched before the GEMV, chained (3: launched
// before it as in 1 where, as here, no op names this one as its next), and launched with the
// dense GEMVs waiting for it by flags (4; the W8A16 GEMV, after its norm kernel, as in 1).
constexpr int kModes[] = {1, 3, 4};

// S slots' random A (S, R, K) and B (S, N, R) of each target (N, row offset), the slots' scales
// and the tokens' slot ids (slots 0, 1, 2 and -1 in turn).
struct Adapters {
  std::vector<Pair> a, b;
  Pair scales, slot_ids;
  std::vector<LoraTargetStacks> cpu_targets, gpu_targets;
  FusedLora cpu() const { return {slot_ids.cpu, scales.cpu, cpu_targets, {}, {}}; }
  FusedLora gpu() const { return {slot_ids.gpu, scales.gpu, gpu_targets, {}, {}}; }
};

Adapters make_adapters(Twin& twin, Rng& rng, int64_t m, int64_t k, int64_t rank,
                       const std::vector<std::pair<int64_t, int64_t>>& targets) {
  const int64_t s = 3;
  Adapters out;
  const auto ak = static_cast<float>(1.7 / std::sqrt(static_cast<double>(k)));
  const auto br = static_cast<float>(1.7 / std::sqrt(static_cast<double>(rank)));
  for (const auto& [n, offset] : targets) {
    out.a.push_back(twin.floats({s, rank, k}, random_floats(rng, s * rank * k, -ak, ak)));
    out.b.push_back(twin.floats({s, n, rank}, random_floats(rng, s * n * rank, -br, br)));
    out.cpu_targets.push_back({out.a.back().cpu, out.b.back().cpu, offset});
    out.gpu_targets.push_back({out.a.back().gpu, out.b.back().gpu, offset});
  }
  out.scales = twin.floats({s}, random_floats(rng, s, 0.5f, 2.0f), DType::kF32);
  std::vector<int32_t> ids(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>(i % 4) - 1;
  if (m == 1) ids[0] = 1;  // a one-token batch uses an adapter
  out.slot_ids = twin.ints<int32_t>({m}, ids);
  return out;
}

// The reference update: the CPU's LoraOps on the matmul's output.
void cpu_lora_apply(Twin& twin, const Tensor& x, const Adapters& ad, Tensor out) {
  const FusedLora l = ad.cpu();
  twin.cpu().lora_ops()->lora_apply_group(x, l.slot_ids, l.targets, l.scales, out);
}

// The rotation's operands for m tokens of head_dim 64: random positions, cache slots 5 i + 2 (a
// cache of 4 blocks of 16), inv_freq of base 10,000.
struct RopeOperands {
  Pair positions, slots, inv_freq;
};
RopeOperands rope_operands(Twin& twin, Rng& rng, int64_t m) {
  std::vector<int32_t> positions(static_cast<size_t>(m)), slots(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    positions[static_cast<size_t>(i)] = static_cast<int32_t>(rng.uniform_int(0, 4095));
    slots[static_cast<size_t>(i)] = static_cast<int32_t>(5 * i + 2);
  }
  std::vector<float> inv_freq(32);
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / 64.0));
  return {twin.ints({m}, positions), twin.ints({m}, slots),
          twin.floats({32}, inv_freq, DType::kF32)};
}

// The lookahead matrices (IB_LORA_IN_GEMV=5) of next's targets over the input of cur's op (its
// dense weight w, (N, k)): each slot's from cur's scale, made by the GPU op and checked against
// the CPU op (its oracle).
std::vector<Pair> lookahead_matrices(Twin& twin, const Adapters& next, int64_t k, const Pair& w,
                                     const Adapters& cur, int64_t rank) {
  std::vector<Pair> ms;
  const std::vector<float> scale = twin.cpu_floats(cur.scales.cpu);
  for (const Pair& a_next : next.a) {
    ms.push_back(twin.output({3, rank, k}));
    const auto slot_of = [&](const Tensor& t, int s) {
      return t.slice_rows(s, 1).reshaped({t.dim(1), t.dim(2)});
    };
    for (int s = 0; s < 3; ++s) {
      for (const bool gpu : {false, true}) {
        LoraOps& ops = gpu ? static_cast<LoraOps&>(twin.gpu()) : *twin.cpu().lora_ops();
        const auto pick = [&](const Pair& p) { return gpu ? p.gpu : p.cpu; };
        ops.lora_lookahead_matrix(slot_of(pick(a_next), s), pick(w), slot_of(pick(cur.a[0]), s),
                                  slot_of(pick(cur.b[0]), s), scale[static_cast<size_t>(s)],
                                  slot_of(pick(ms.back()), s));
      }
    }
    EXPECT_LT(twin.error(ms.back()), tolerance(twin.dtype())) << "lookahead matrix";
  }
  return ms;
}

// The GPU ops run eagerly, then again from a CUDA graph after `reset` restored their outputs;
// `check` runs after each.
void eager_and_graph(Twin& twin, const std::function<void()>& reset,
                     const std::function<void()>& gpu_ops,
                     const std::function<void(const char*)>& check) {
  reset();
  gpu_ops();
  check("eager");
  reset();
  twin.gpu().synchronize();
  testing::replay_in_graph(twin, gpu_ops);
  check("graph");
}

TEST_P(CudaFusedLora, RmsMatmulSwiGluAddsTheUpdateBeforeSwiGlu) {
  Twin twin(GetParam());
  Rng rng(61);
  struct Case {
    int64_t m, f, k, rank;
  };
  for (const Case& c : {Case{1, 1000, 512, 16}, Case{5, 72, 128, 8}, Case{8, 1152, 896, 64}}) {
    Pair h = twin.floats({c.m, c.k}, random_floats(rng, c.m * c.k, -2.0f, 2.0f));
    Pair w = twin.floats({2 * c.f, c.k}, random_floats(rng, 2 * c.f * c.k, -0.1f, 0.1f));
    Pair ones = twin.floats({c.k}, std::vector<float>(static_cast<size_t>(c.k), 1.0f));
    const Adapters ad = make_adapters(twin, rng, c.m, c.k, c.rank, {{c.f, 0}, {c.f, c.f}});
    Pair normed = twin.output({c.m, c.k});
    Pair gate_up = twin.output({c.m, 2 * c.f});
    Pair out = twin.output({c.m, c.f});
    twin.cpu().rms_norm(h.cpu, ones.cpu, 1e-6f, normed.cpu);
    twin.cpu().matmul(normed.cpu, w.cpu, nullptr, gate_up.cpu);
    cpu_lora_apply(twin, normed.cpu, ad, gate_up.cpu);
    twin.cpu().silu_mul(gate_up.cpu, out.cpu);
    const FusedLora gpu_lora = ad.gpu();
    for (const int mode : kModes) {
      twin.gpu().set_lora_in_gemv(mode);
      eager_and_graph(
          twin, [] {},
          [&] { twin.gpu().rms_matmul_swiglu(h.gpu, nullptr, w.gpu, 1e-6f, out.gpu, &gpu_lora); },
          [&](const char* how) {
            ASSERT_TRUE(twin.gpu().device_status().ok());
            EXPECT_LT(twin.error(out), tolerance(GetParam()))
                << how << " mode " << mode << " m=" << c.m << " f=" << c.f << " k=" << c.k
                << " r=" << c.rank;
          });
    }
  }
}

// INT8 W8A16 keeps its norm gain: the shrink multiplies x by it, as the GEMV's input is.
TEST_P(CudaFusedLora, RmsMatmulSwiGluAppliesTheGainToTheShrink) {
  Twin twin(GetParam());
  Rng rng(62);
  const int64_t m = 6, f = 256, k = 1024, rank = 16;
  const float eps = 1e-5f;
  Pair h = twin.floats({m, k}, random_floats(rng, m * k, -2.0f, 2.0f));
  Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));
  Pair dense = twin.floats({2 * f, k}, random_floats(rng, 2 * f * k, -0.05f, 0.05f));
  const WeightFormat format = WeightFormat::kInt8W8A16;
  const Pair data = twin.empty(quantized_data_dtype(format), {2 * f, k});
  const Pair scales = twin.empty(DType::kF32, {2 * f});
  WeightRef w_cpu, w_gpu;
  w_cpu.format = w_gpu.format = format;
  w_cpu.data = data.cpu;
  w_gpu.data = data.gpu;
  w_cpu.scales = scales.cpu;
  w_gpu.scales = scales.gpu;
  twin.cpu().quantize_weight(dense.cpu, w_cpu);
  twin.gpu().quantize_weight(dense.gpu, w_gpu);
  const Adapters ad = make_adapters(twin, rng, m, k, rank, {{f, 0}, {f, f}});
  Pair normed = twin.output({m, k});
  Pair gate_up = twin.output({m, 2 * f});
  Pair out = twin.output({m, f});
  twin.cpu().rms_norm(h.cpu, gain.cpu, eps, normed.cpu);
  twin.cpu().matmul(normed.cpu, w_cpu, nullptr, gate_up.cpu);
  cpu_lora_apply(twin, normed.cpu, ad, gate_up.cpu);
  twin.cpu().silu_mul(gate_up.cpu, out.cpu);
  const FusedLora gpu_lora = ad.gpu();
  for (const int mode : kModes) {
    twin.gpu().set_lora_in_gemv(mode);
    twin.gpu().rms_matmul_swiglu(h.gpu, &gain.gpu, w_gpu, eps, out.gpu, &gpu_lora);
    ASSERT_TRUE(twin.gpu().device_status().ok());
    EXPECT_LT(twin.error(out), tolerance(GetParam())) << "mode " << mode;
  }
}

TEST_P(CudaFusedLora, MatmulAddAddsTheUpdateToTheResidual) {
  Twin twin(GetParam());
  Rng rng(63);
  struct Case {
    int64_t m, n, k, rank;
  };
  // The last case with IB_ADD_CUBLASLT on: a weight past the GEMV's 64 MiB rule at 4 tokens takes
  // cuBLASLt with beta = 1, then the expand.
  for (const Case& c : {Case{1, 4096, 4096, 16}, Case{8, 1000, 512, 8}, Case{4, 4096, 8448, 16}}) {
    twin.gpu().set_add_with_cublaslt(c.k == 8448);
    const auto res0 = twin.representable(random_floats(rng, c.m * c.n, -2.0f, 2.0f));
    Pair x = twin.floats({c.m, c.k}, random_floats(rng, c.m * c.k));
    Pair w = twin.floats({c.n, c.k}, random_floats(rng, c.n * c.k, -0.05f, 0.05f));
    const Adapters ad = make_adapters(twin, rng, c.m, c.k, c.rank, {{c.n, 0}});
    Pair residual = twin.floats({c.m, c.n}, res0);
    Pair prod = twin.output({c.m, c.n});
    twin.cpu().matmul(x.cpu, w.cpu, nullptr, prod.cpu);
    cpu_lora_apply(twin, x.cpu, ad, prod.cpu);
    std::vector<float> want = twin.cpu_floats(prod.cpu);
    for (size_t i = 0; i < want.size(); ++i) want[i] += res0[i];
    const FusedLora gpu_lora = ad.gpu();
    for (const int mode : kModes) {
      twin.gpu().set_lora_in_gemv(mode);
      eager_and_graph(
          twin, [&] { twin.gpu().copy_from_host(residual.gpu, res0.data(), DType::kF32); },
          [&] { twin.gpu().matmul_add(x.gpu, w.gpu, residual.gpu, &gpu_lora); },
          [&](const char* how) {
            ASSERT_TRUE(twin.gpu().device_status().ok());
            EXPECT_LT(testing::rel_l2(twin.gpu_floats(residual.gpu), want), tolerance(GetParam()))
                << how << " mode " << mode << " m=" << c.m << " n=" << c.n << " k=" << c.k
                << " r=" << c.rank;
          });
    }
  }
  twin.gpu().set_add_with_cublaslt(false);
}

// q, k and v as three targets of one group: each head's rows rotated after the update, k and v
// written to the cache with it; the LoRA variant at 2 blocks an SM and, with IB_LORA_QKV_BLOCKS,
// at the base's 3.
TEST_P(CudaFusedLora, RmsMatmulRopeCacheAddsTheUpdateBeforeTheRotation) {
  Twin twin(GetParam());
  Rng rng(64);
  const double tol = tolerance(GetParam());
  AttentionShape shape;
  shape.num_heads = 8;
  shape.num_kv_heads = 2;
  shape.head_dim = 64;
  const int64_t q = 8 * 64, kv = 2 * 64, n = q + 2 * kv, k = 512, rank = 16;
  const int64_t blocks = 4, bs = 16, cache = blocks * 2 * bs * 64;
  for (const int64_t m : {1, 7}) {
    Pair h = twin.floats({m, k}, random_floats(rng, m * k, -2.0f, 2.0f));
    Pair w = twin.floats({n, k}, random_floats(rng, n * k, -0.05f, 0.05f));
    Pair bias = twin.floats({n}, random_floats(rng, n));
    Pair ones = twin.floats({k}, std::vector<float>(static_cast<size_t>(k), 1.0f));
    const Adapters ad = make_adapters(twin, rng, m, k, rank, {{q, 0}, {kv, q}, {kv, q + kv}});
    const std::vector<float> k0 = random_floats(rng, cache), v0 = random_floats(rng, cache);
    Pair kc = twin.floats({blocks, 2, bs, 64}, k0);
    Pair vc = twin.floats({blocks, 2, bs, 64}, v0);
    const auto [pos, slot, freq] = rope_operands(twin, rng, m);
    Pair normed = twin.output({m, k});
    Pair qkv = twin.output({m, n});
    twin.cpu().rms_norm(h.cpu, ones.cpu, 1e-5f, normed.cpu);
    twin.cpu().matmul(normed.cpu, w.cpu, &bias.cpu, qkv.cpu);
    cpu_lora_apply(twin, normed.cpu, ad, qkv.cpu);
    twin.cpu().rope_and_cache(qkv.cpu, pos.cpu, slot.cpu, freq.cpu, {kc.cpu, vc.cpu, 16}, shape);
    const FusedLora gpu_lora = ad.gpu();
    // IB_LORA_QKV_BLOCKS: the LoRA variant at 2 blocks an SM, then with the base's 3-blocks
    // register cap (from 2 tokens).
    for (const bool three : {false, true}) {
      set_lora_qkv_blocks(three);
      for (const int mode : kModes) {
        twin.gpu().set_lora_in_gemv(mode);
        eager_and_graph(
            twin,
            [&] {
              twin.gpu().copy_from_host(kc.gpu, k0.data(), DType::kF32);
              twin.gpu().copy_from_host(vc.gpu, v0.data(), DType::kF32);
            },
            [&] {
              twin.gpu().rms_matmul_rope_cache(h.gpu, nullptr, w.gpu, &bias.gpu, 1e-5f, pos.gpu,
                                               slot.gpu, freq.gpu, {kc.gpu, vc.gpu, 16}, shape,
                                               qkv.gpu, &gpu_lora);
            },
            [&](const char* how) {
              ASSERT_TRUE(twin.gpu().device_status().ok());
              EXPECT_LT(twin.error(qkv), tol)
                  << how << " mode " << mode << " qkv m=" << m << " three " << three;
              EXPECT_LT(twin.error(kc), tol) << how << " k cache m=" << m;
              EXPECT_LT(twin.error(vc), tol) << how << " v cache m=" << m;
            });
      }
    }
    set_lora_qkv_blocks(false);
  }
}

// Chained shrinks (IB_LORA_IN_GEMV=3): a decode layer's ops from o on, each naming the targets
// of the op after it (FusedLora::next): o's residual add (then gate/up's shrink rides in it), the
// gate/up SwiGLU (then down's), down's residual add (then the next layer's q/k/v's), and q/k/v.
// Against the CPU's unfused ops (matmul, lora_apply_group, add_rms_norm, silu_mul,
// rope_and_cache) and against the same ops with every shrink launched (1): one shrink launch (o's)
// instead of four, the same residual, SwiGLU output, q/k/v and cache; eagerly and from a graph.
// Flagged shrinks (4) over the same layer: four launched shrinks, each GEMV waiting for its by
// flags, equal to 1 bit for bit, and a graph of them replayed three times. Lookahead shrinks (5)
// over the same layer: o's and down's launches also compute gate/up's and q/k/v's from the
// lookahead matrices (FusedLora::next_m, made by LoraOps::lora_lookahead_matrix, itself checked
// against the CPU op): two shrink launches instead of four, the same results within the
// tolerance.
// Every GEMV here has more row tiles than the H200 has SMs (more than one wave of blocks).
TEST_P(CudaFusedLora, ChainedAndFlaggedShrinksGiveTheLaunchedShrinksResults) {
  Twin twin(GetParam());
  Rng rng(65);
  const double tol = tolerance(GetParam());
  const float eps = 1e-5f;
  AttentionShape shape;
  shape.num_heads = 36;
  shape.num_kv_heads = 2;
  shape.head_dim = 64;
  const int64_t m = 7, d = 36 * 64, f = 2176, rank = 16, kv = 2 * 64, n_qkv = d + 2 * kv;
  const int64_t blocks = 4, bs = 16, cache = blocks * 2 * bs * 64;
  Pair attn = twin.floats({m, d}, random_floats(rng, m * d, -2.0f, 2.0f));
  Pair wo = twin.floats({d, d}, random_floats(rng, d * d, -0.05f, 0.05f));
  Pair wgu = twin.floats({2 * f, d}, random_floats(rng, 2 * f * d, -0.1f, 0.1f));
  Pair wd = twin.floats({d, f}, random_floats(rng, d * f, -0.05f, 0.05f));
  Pair wqkv = twin.floats({n_qkv, d}, random_floats(rng, n_qkv * d, -0.05f, 0.05f));
  Pair ones = twin.floats({d}, std::vector<float>(static_cast<size_t>(d), 1.0f));
  const Adapters o_ad = make_adapters(twin, rng, m, d, rank, {{d, 0}});
  const Adapters gu_ad = make_adapters(twin, rng, m, d, rank, {{f, 0}, {f, f}});
  const Adapters down_ad = make_adapters(twin, rng, m, f, rank, {{d, 0}});
  const Adapters qkv_ad = make_adapters(twin, rng, m, d, rank, {{d, 0}, {kv, d}, {kv, d + kv}});
  const auto res0 = twin.representable(random_floats(rng, m * d, -2.0f, 2.0f));
  const std::vector<float> k0 = random_floats(rng, cache), v0 = random_floats(rng, cache);
  const auto [pos, slot, freq] = rope_operands(twin, rng, m);
  Pair residual = twin.floats({m, d}, res0);
  Pair kc = twin.floats({blocks, 2, bs, 64}, k0);
  Pair vc = twin.floats({blocks, 2, bs, 64}, v0);
  Pair act = twin.output({m, f});
  Pair qkv = twin.output({m, n_qkv});

  // The CPU's unfused layer.
  Pair tmp = twin.output({m, d});
  Pair hidden = twin.output({m, d});
  Pair gate_up = twin.output({m, 2 * f});
  Backend& cpu = twin.cpu();
  cpu.matmul(attn.cpu, wo.cpu, nullptr, tmp.cpu);
  cpu_lora_apply(twin, attn.cpu, o_ad, tmp.cpu);
  cpu.add_rms_norm(residual.cpu, tmp.cpu, ones.cpu, eps, hidden.cpu);
  cpu.matmul(hidden.cpu, wgu.cpu, nullptr, gate_up.cpu);
  cpu_lora_apply(twin, hidden.cpu, gu_ad, gate_up.cpu);
  cpu.silu_mul(gate_up.cpu, act.cpu);
  cpu.matmul(act.cpu, wd.cpu, nullptr, tmp.cpu);
  cpu_lora_apply(twin, act.cpu, down_ad, tmp.cpu);
  cpu.add_rms_norm(residual.cpu, tmp.cpu, ones.cpu, eps, hidden.cpu);
  cpu.matmul(hidden.cpu, wqkv.cpu, nullptr, qkv.cpu);
  cpu_lora_apply(twin, hidden.cpu, qkv_ad, qkv.cpu);
  cpu.rope_and_cache(qkv.cpu, pos.cpu, slot.cpu, freq.cpu, {kc.cpu, vc.cpu, 16}, shape);

  // One slot-id tensor for the four ops, as the engine passes its step's (equal values here: a
  // chain is taken only by an op with the slot ids it was made with).
  FusedLora o_l = o_ad.gpu(), gu_l = gu_ad.gpu(), down_l = down_ad.gpu(), qkv_l = qkv_ad.gpu();
  gu_l.slot_ids = down_l.slot_ids = qkv_l.slot_ids = o_l.slot_ids;
  o_l.next = gu_l.targets;
  gu_l.next = down_l.targets;
  down_l.next = qkv_l.targets;
  // Lookahead shrinks (5): gate/up's matrices over o's input, q/k/v's over down's.
  const std::vector<Pair> gu_m = lookahead_matrices(twin, gu_ad, d, wo, o_ad, rank);
  const std::vector<Pair> qkv_m = lookahead_matrices(twin, qkv_ad, f, wd, down_ad, rank);
  std::vector<Tensor> gu_mt, qkv_mt;
  for (const Pair& p : gu_m) gu_mt.push_back(p.gpu);
  for (const Pair& p : qkv_m) qkv_mt.push_back(p.gpu);
  o_l.next_m = gu_mt;
  down_l.next_m = qkv_mt;
  const auto reset = [&] {
    twin.gpu().copy_from_host(residual.gpu, res0.data(), DType::kF32);
    twin.gpu().copy_from_host(kc.gpu, k0.data(), DType::kF32);
    twin.gpu().copy_from_host(vc.gpu, v0.data(), DType::kF32);
  };
  const auto layer = [&] {
    CudaBackend& gpu = twin.gpu();
    gpu.matmul_add(attn.gpu, wo.gpu, residual.gpu, &o_l);
    gpu.rms_matmul_swiglu(residual.gpu, nullptr, wgu.gpu, eps, act.gpu, &gu_l);
    gpu.matmul_add(act.gpu, wd.gpu, residual.gpu, &down_l);
    gpu.rms_matmul_rope_cache(residual.gpu, nullptr, wqkv.gpu, nullptr, eps, pos.gpu, slot.gpu,
                              freq.gpu, {kc.gpu, vc.gpu, 16}, shape, qkv.gpu, &qkv_l);
  };
  const Pair* outputs[] = {&residual, &act, &qkv, &kc, &vc};
  std::vector<std::vector<float>> launched;  // mode 1's outputs, in outputs' order
  const auto gpu_outputs = [&] {
    std::vector<std::vector<float>> v;
    for (const Pair* p : outputs) v.push_back(twin.gpu_floats(p->gpu));
    return v;
  };
  for (const int mode : {1, 3, 4, 5}) {
    twin.gpu().set_lora_in_gemv(mode);
    const int64_t shrinks = twin.gpu().lora_shrink_launches();
    const int64_t pairs = twin.gpu().lora_sync_pairs();
    eager_and_graph(twin, reset, layer, [&](const char* how) {
      ASSERT_TRUE(twin.gpu().device_status().ok());
      const std::string at = std::string(how) + " mode " + std::to_string(mode);
      EXPECT_LT(twin.error(residual), tol) << at << " residual";
      EXPECT_LT(twin.error(act), tol) << at << " SwiGLU output";
      EXPECT_LT(twin.error(qkv), tol) << at << " qkv";
      EXPECT_LT(twin.error(kc), tol) << at << " k cache";
      EXPECT_LT(twin.error(vc), tol) << at << " v cache";
      if (launched.empty()) {
        launched = gpu_outputs();
      } else if (mode == 4) {  // the same kernels' arithmetic in the same order: the same bits
        EXPECT_EQ(gpu_outputs(), launched) << at << " against launched shrinks";
      } else {  // the same sums in another order: far inside the dtype's tolerance (5: also
        // through the lookahead matrices, each rounded once into act: 3.2e-3 measured in bf16)
        EXPECT_LT(testing::rel_l2(twin.gpu_floats(qkv.gpu), launched[2]),
                  mode == 5 ? tol / 2 : tol / 4)
            << at << " against launched shrinks";
      }
    });
    // The eager pass and the capture each launch o's shrink, with 5 also down's (each carrying
    // the next op's), and with modes 1 and 4 all four; with 4 all four GEMVs meet theirs by
    // flags.
    EXPECT_EQ(twin.gpu().lora_shrink_launches() - shrinks, mode == 3   ? 2
                                                           : mode == 5 ? 4
                                                                       : 8)
        << "mode " << mode;
    EXPECT_EQ(twin.gpu().lora_sync_pairs() - pairs, mode == 4 ? 8 : 0) << "mode " << mode;
    if (mode != 4) continue;
    // One graph replayed three times reuses the flag sets: each replay's outputs the same, and
    // every flag back to zero after (the residual and caches the layer updates restored before
    // each replay).
    reset();
    twin.gpu().synchronize();
    testing::replay_in_graph(twin, layer, 3, [&](int replay) {
      ASSERT_TRUE(twin.gpu().device_status().ok());
      EXPECT_EQ(gpu_outputs(), launched) << "replay " << replay;
      EXPECT_EQ(twin.gpu().lora_sync_words(),
                std::vector<unsigned>(size_t{kLoraSyncSets} * kLoraSyncWords, 0u))
          << "replay " << replay;
      reset();
      twin.gpu().synchronize();
    });
  }
}

// IB_LORA_ATTN=1 (with 5): the decode attention before o computes o's shrink and gate/up's
// lookahead in its finishing blocks (lora_before_attention), and o's op launches no shrink. Over
// attention -> o -> gate/up for 7 decode tokens (slots 0, 1, 2 and the base; contexts of 1 to 700
// keys under a graph's 8,192-token hint: one partition, and several merged in the kernel): the
// attention's output the same bits as without, the residual and SwiGLU output within the
// tolerance of the CPU's unfused ops and far inside it of the lookahead launch's; eagerly and
// from a graph replayed three times (the grid's counter back to zero after each).
TEST_P(CudaFusedLora, AttentionComputesOsLookahead) {
  Twin twin(GetParam());
  Rng rng(66);
  const double tol = tolerance(GetParam());
  const float eps = 1e-5f;
  AttentionShape shape;
  shape.num_heads = 8;
  shape.num_kv_heads = 2;
  shape.head_dim = 64;
  const int64_t m = 7, d = 8 * 64, f = 640, rank = 16, bs = 16;
  const std::vector<int32_t> contexts = {1, 20, 300, 700, 161, 2, 513};
  std::vector<int32_t> query_start(m + 1), table;
  int32_t blocks = 0;
  const int64_t max_blocks = (700 + bs - 1) / bs;
  for (int64_t i = 0; i < m; ++i) {
    query_start[static_cast<size_t>(i + 1)] = static_cast<int32_t>(i + 1);
    for (int64_t j = 0; j < max_blocks; ++j) {
      table.push_back(j * bs < contexts[static_cast<size_t>(i)] ? blocks++ : -1);
    }
  }
  const int64_t cache = int64_t{blocks} * 2 * bs * 64, row = d + 2 * 2 * 64;
  Pair qkv = twin.floats({m, row}, random_floats(rng, m * row, -2.0f, 2.0f));
  Pair kc = twin.floats({blocks, 2, bs, 64}, random_floats(rng, cache, -2.0f, 2.0f));
  Pair vc = twin.floats({blocks, 2, bs, 64}, random_floats(rng, cache));
  Pair qs = twin.ints({m + 1}, query_start);
  Pair lens = twin.ints({m}, contexts);
  Pair tables = twin.ints({m, max_blocks}, table);
  const auto meta = [&](bool gpu) {
    AttentionMetadata a;
    a.num_seqs = a.decode_prefix = static_cast<int>(m);
    a.num_tokens = static_cast<int>(m);
    a.query_start = gpu ? qs.gpu : qs.cpu;
    a.context_lens = gpu ? lens.gpu : lens.cpu;
    a.block_tables = gpu ? tables.gpu : tables.cpu;
    a.max_query_len = 1;
    a.max_context_len = gpu ? 8192 : 700;
    return a;
  };
  const KvCacheLayer kv_cpu{kc.cpu, vc.cpu, static_cast<int>(bs)};
  const KvCacheLayer kv_gpu{kc.gpu, vc.gpu, static_cast<int>(bs)};
  Pair wo = twin.floats({d, d}, random_floats(rng, d * d, -0.05f, 0.05f));
  Pair wgu = twin.floats({2 * f, d}, random_floats(rng, 2 * f * d, -0.1f, 0.1f));
  Pair ones = twin.floats({d}, std::vector<float>(static_cast<size_t>(d), 1.0f));
  const Adapters o_ad = make_adapters(twin, rng, m, d, rank, {{d, 0}});
  const Adapters gu_ad = make_adapters(twin, rng, m, d, rank, {{f, 0}, {f, f}});
  const auto res0 = twin.representable(random_floats(rng, m * d, -2.0f, 2.0f));
  Pair attn = twin.output({m, d});
  Pair residual = twin.floats({m, d}, res0);
  Pair act = twin.output({m, f});

  // The CPU's unfused ops.
  Pair tmp = twin.output({m, d});
  Pair hidden = twin.output({m, d});
  Pair gate_up = twin.output({m, 2 * f});
  Backend& cpu = twin.cpu();
  cpu.attention(qkv.cpu, kv_cpu, meta(false), shape, attn.cpu);
  cpu.matmul(attn.cpu, wo.cpu, nullptr, tmp.cpu);
  cpu_lora_apply(twin, attn.cpu, o_ad, tmp.cpu);
  cpu.add_rms_norm(residual.cpu, tmp.cpu, ones.cpu, eps, hidden.cpu);
  cpu.matmul(hidden.cpu, wgu.cpu, nullptr, gate_up.cpu);
  cpu_lora_apply(twin, hidden.cpu, gu_ad, gate_up.cpu);
  cpu.silu_mul(gate_up.cpu, act.cpu);

  FusedLora o_l = o_ad.gpu(), gu_l = gu_ad.gpu();
  gu_l.slot_ids = o_l.slot_ids;
  o_l.next = gu_l.targets;
  const std::vector<Pair> gu_m = lookahead_matrices(twin, gu_ad, d, wo, o_ad, rank);
  std::vector<Tensor> gu_mt;
  for (const Pair& p : gu_m) gu_mt.push_back(p.gpu);
  o_l.next_m = gu_mt;
  CudaBackend& gpu = twin.gpu();
  gpu.set_lora_in_gemv(5);
  gpu.set_attention_path(AttentionPath::kSplitKv);
  const auto reset = [&] { gpu.copy_from_host(residual.gpu, res0.data(), DType::kF32); };
  const auto layer = [&] {
    gpu.lora_before_attention(attn.gpu, residual.gpu, &o_l);
    gpu.attention(qkv.gpu, kv_gpu, meta(true), shape, attn.gpu);
    gpu.matmul_add(attn.gpu, wo.gpu, residual.gpu, &o_l);
    gpu.rms_matmul_swiglu(residual.gpu, nullptr, wgu.gpu, eps, act.gpu, &gu_l);
  };
  std::vector<std::vector<float>> launched;  // attention, residual, act with the launch
  for (const bool on : {false, true}) {
    ASSERT_TRUE(gpu.set_lora_attn(on).ok());
    const int64_t shrinks = gpu.lora_shrink_launches(), attns = gpu.attn_lora_launches();
    eager_and_graph(twin, reset, layer, [&](const char* how) {
      ASSERT_TRUE(gpu.device_status().ok());
      const std::string at = std::string(how) + (on ? " in the attention" : " launched");
      EXPECT_LT(twin.error(attn), tol) << at << " attention";
      EXPECT_LT(twin.error(residual), tol) << at << " residual";
      EXPECT_LT(twin.error(act), tol) << at << " SwiGLU output";
      if (!on) {
        launched = {twin.gpu_floats(attn.gpu), twin.gpu_floats(residual.gpu),
                    twin.gpu_floats(act.gpu)};
        return;
      }
      EXPECT_EQ(twin.gpu_floats(attn.gpu), launched[0]) << at << " attention";
      EXPECT_LT(testing::rel_l2(twin.gpu_floats(residual.gpu), launched[1]), tol / 4) << at;
      EXPECT_LT(testing::rel_l2(twin.gpu_floats(act.gpu), launched[2]), tol / 2) << at;
    });
    // The eager pass and the capture: o's lookahead launched twice, or computed by the
    // attention twice and never launched.
    EXPECT_EQ(gpu.lora_shrink_launches() - shrinks, on ? 0 : 2);
    EXPECT_EQ(gpu.attn_lora_launches() - attns, on ? 2 : 0);
  }
  // One graph replayed three times: the same outputs each time (the counter reset by the
  // grid's last finishing block).
  reset();
  gpu.synchronize();
  const std::vector<float> act0 = twin.gpu_floats(act.gpu);
  testing::replay_in_graph(twin, layer, 3, [&](int replay) {
    ASSERT_TRUE(gpu.device_status().ok());
    EXPECT_EQ(twin.gpu_floats(act.gpu), act0) << "replay " << replay;
    reset();
    gpu.synchronize();
  });
  ASSERT_TRUE(gpu.set_lora_attn(false).ok());
  gpu.set_attention_path(AttentionPath::kAuto);
}

INSTANTIATE_TEST_SUITE_P(HalfTypes, CudaFusedLora, ::testing::Values(DType::kBF16, DType::kF16),
                         testing::dtype_param_name);

}  // namespace
}  // namespace ib::cuda
