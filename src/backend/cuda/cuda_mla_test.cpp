// Differential tests of the CUDA multi-head latent attention (mla.cu) against the CPU backend's
// (cpu/mla.cpp): the latent's norm, the interleaved rotations of q_pe and k_pe and the cache write,
// then attention over the cached latents with the absorbed up-projections, for a batch that mixes
// decode tokens, a whole prefill and a short chunk, at DeepSeek-V2-Lite's latent (R 512, P 64,
// N 128, V 128) and at odd sizes. Tolerance: the dtype's (both sides' inputs are the same values;
// the GPU stores q, the latent and the cache in x's dtype).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cuda/detail/mla_kernels.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;

class CudaMla : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

struct Seq {
  int context_len, query_len;
};

void expect_mla_matches(DType dtype, const MlaShape& shape, const std::vector<Seq>& seqs) {
  Twin twin(dtype);
  Rng rng(21);
  const int h = shape.num_heads, r = shape.kv_lora_rank, p = shape.qk_rope_head_dim;
  const int n = shape.qk_nope_head_dim, v = shape.v_head_dim, bs = 16;
  std::vector<int32_t> query_start{0}, context_lens;
  int max_blocks = 1, total_blocks = 2, max_query = 0, max_context = 0;
  for (const Seq& s : seqs) {
    query_start.push_back(query_start.back() + s.query_len);
    context_lens.push_back(s.context_len);
    const int blocks = (s.context_len + bs - 1) / bs;
    max_blocks = std::max(max_blocks, blocks);
    total_blocks += blocks;
    max_query = std::max(max_query, s.query_len);
    max_context = std::max(max_context, s.context_len);
  }
  const int num_seqs = static_cast<int>(seqs.size());
  const int tokens = query_start.back();
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(num_seqs * max_blocks), -1);
  std::vector<int32_t> positions, slots;
  size_t next = 0;
  for (int i = 0; i < num_seqs; ++i) {
    const Seq& s = seqs[static_cast<size_t>(i)];
    for (int j = 0; j < (s.context_len + bs - 1) / bs; ++j)
      table[static_cast<size_t>(i * max_blocks + j)] = ids[next++];
    for (int pos = s.context_len - s.query_len; pos < s.context_len; ++pos) {
      positions.push_back(pos);
      slots.push_back(table[static_cast<size_t>(i * max_blocks + pos / bs)] * bs + pos % bs);
    }
  }
  slots.back() = -1;  // a token whose entry is not written (its key is the cache's old one)
  const int64_t q_row = int64_t{h} * (n + p), width = r + p;
  Pair q = twin.floats({tokens, q_row}, random_floats(rng, tokens * q_row, -1, 1));
  Pair latent = twin.floats({tokens, width}, random_floats(rng, tokens * width, -2, 2));
  const Pair kv_norm = twin.floats({r}, random_floats(rng, r, 0.5f, 1.5f));
  std::vector<float> inv_freq(static_cast<size_t>(p / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i)
    inv_freq[i] = static_cast<float>(std::pow(10000.0, -2.0 * static_cast<double>(i) / p));
  const Pair freq = twin.floats({p / 2}, inv_freq, DType::kF32);
  const Pair pos = twin.ints({tokens}, positions);
  const Pair slot = twin.ints({tokens}, slots);
  Pair cache = twin.floats({total_blocks, 1, bs, width},
                           random_floats(rng, int64_t{total_blocks} * bs * width, -1, 1));
  const KvCacheLayer kv_cpu{cache.cpu, Tensor{}, bs}, kv_gpu{cache.gpu, Tensor{}, bs};
  const float eps = 1e-6f;
  MlaOps* cpu_mla = twin.cpu().mla_ops();
  ASSERT_NE(cpu_mla, nullptr);
  cpu_mla->mla_rope_and_cache(q.cpu, latent.cpu, kv_norm.cpu, eps, pos.cpu, slot.cpu, freq.cpu,
                              kv_cpu, shape);
  twin.gpu().mla_rope_and_cache(q.gpu, latent.gpu, kv_norm.gpu, eps, pos.gpu, slot.gpu, freq.gpu,
                                kv_gpu, shape);
  EXPECT_LT(twin.error(q), tolerance(dtype)) << "q";
  EXPECT_LT(twin.error(latent), tolerance(dtype)) << "latent";
  EXPECT_LT(twin.error(cache), tolerance(dtype)) << "cache";

  WeightRef kv_b_cpu, kv_b_gpu;
  const int64_t kv_rows = int64_t{h} * (n + v);
  const Pair kv_b = twin.floats({kv_rows, r}, random_floats(rng, kv_rows * r, -0.1f, 0.1f));
  kv_b_cpu.data = kv_b.cpu;
  kv_b_gpu.data = kv_b.gpu;
  const Pair qs = twin.ints({num_seqs + 1}, query_start);
  const Pair cl = twin.ints({num_seqs}, context_lens);
  const Pair bt = twin.ints({num_seqs, max_blocks}, table);
  const auto meta = [&](bool gpu) {
    AttentionMetadata m;
    m.num_seqs = num_seqs;
    m.num_tokens = tokens;
    m.query_start = gpu ? qs.gpu : qs.cpu;
    m.context_lens = gpu ? cl.gpu : cl.cpu;
    m.block_tables = gpu ? bt.gpu : bt.cpu;
    m.max_query_len = max_query;
    m.max_context_len = max_context;
    return m;
  };
  for (const bool split : {false, true}) {  // the fused kernel, then IB_MLA_SPLIT's three
    Pair out = twin.output({tokens, int64_t{h} * v});
    cpu_mla->mla_attention(q.cpu, kv_b_cpu, kv_cpu, meta(false), shape, out.cpu);
    twin.gpu().set_mla_split(split);
    twin.gpu().mla_attention(q.gpu, kv_b_gpu, kv_gpu, meta(true), shape, out.gpu);
    const Status status = twin.gpu().device_status();
    ASSERT_TRUE(status.ok()) << status.error().message;
    EXPECT_LT(twin.error(out), tolerance(dtype)) << (split ? "split" : "fused") << " attention";
  }
}

MlaShape shape_of(int h, int r, int n, int p, int v) {
  MlaShape s;
  s.num_heads = h;
  s.kv_lora_rank = r;
  s.qk_nope_head_dim = n;
  s.qk_rope_head_dim = p;
  s.v_head_dim = v;
  s.scale = 1.0f / std::sqrt(static_cast<float>(n + p));
  s.rope_scale = 1.2f;  // YaRN's attention factor, folded into cos and sin
  return s;
}

// DeepSeek-V2-Lite's latent sizes (3 of its 16 heads): decode tokens at contexts across block
// boundaries, a whole 40-token prefill, a 3-token chunk.
TEST_P(CudaMla, MatchesTheCpuAtDeepSeekV2LiteSizes) {
  expect_mla_matches(GetParam(), shape_of(3, 512, 128, 64, 128),
                     {{37, 1}, {40, 40}, {70, 3}, {1, 1}});
}

// A decode bucket's padding row (a sequence of one token and no context, as the engine pads its
// graphs' batches) gets zeros, not 0 / 0; the CPU op is not defined there, so the real rows are
// compared with it and the padding row with zero.
TEST_P(CudaMla, PaddingRowsGetZeros) {
  Twin twin(GetParam());
  Rng rng(22);
  const MlaShape shape = shape_of(2, 64, 16, 8, 12);
  const int r = shape.kv_lora_rank, p = shape.qk_rope_head_dim, bs = 16;
  const int64_t q_row = 2 * (16 + 8), width = r + p;
  const Pair q = twin.floats({2, q_row}, random_floats(rng, 2 * q_row, -1, 1));
  const Pair cache = twin.floats({2, 1, bs, width}, random_floats(rng, 2 * bs * width, -1, 1));
  const Pair kv_b = twin.floats({2 * (16 + 12), r}, random_floats(rng, 2 * 28 * r, -0.1f, 0.1f));
  WeightRef w;
  w.data = kv_b.gpu;
  const Pair qs = twin.ints({3}, std::vector<int32_t>{0, 1, 2});
  const Pair cl = twin.ints({2}, std::vector<int32_t>{5, 0});
  const Pair bt = twin.ints({2, 1}, std::vector<int32_t>{1, -1});
  AttentionMetadata m;
  m.num_seqs = 2;
  m.num_tokens = 2;
  m.query_start = qs.gpu;
  m.context_lens = cl.gpu;
  m.block_tables = bt.gpu;
  m.max_query_len = 1;
  m.max_context_len = 5;
  for (const bool split : {false, true}) {
    const Pair out = twin.output({2, 2 * 12});
    twin.gpu().set_mla_split(split);
    twin.gpu().mla_attention(q.gpu, w, {cache.gpu, Tensor{}, bs}, m, shape, out.gpu);
    const std::vector<float> got = twin.gpu_floats(out.gpu);
    for (size_t i = 0; i < 24; ++i) EXPECT_TRUE(std::isfinite(got[i])) << i << " split " << split;
    for (size_t i = 24; i < 48; ++i) EXPECT_EQ(got[i], 0.0f) << i << " split " << split;
  }
}

// Sizes that are not multiples of a warp or of the block's threads.
TEST_P(CudaMla, MatchesTheCpuAtOddSizes) {
  expect_mla_matches(GetParam(), shape_of(2, 96, 48, 10, 40), {{17, 1}, {5, 5}, {33, 2}});
}

// V2-Lite's sizes past many rounds of the kernel's 32 keys (a 600-token context), and decode rows
// beside a 2-token chunk.
TEST_P(CudaMla, MatchesTheCpuPastManyRounds) {
  expect_mla_matches(GetParam(), shape_of(4, 512, 128, 64, 128), {{600, 1}, {97, 2}, {33, 1}});
}

// 16-byte loads (R and P multiples of a vector) with head sizes that are not: N 20, V 24.
TEST_P(CudaMla, MatchesTheCpuOnTheVectorPathAtOddHeadSizes) {
  expect_mla_matches(GetParam(), shape_of(3, 96, 20, 16, 24), {{45, 1}, {9, 9}, {70, 3}});
}

// IB_MLA_SPLIT's plan: two blocks per SM over the token x head rows (at most kMlaMaxSplits), fewer
// splits when a token's scratch would not fit, and token chunks that fit the workspace.
TEST(CudaMlaShape, SplitPlanFillsTheSmsWithinTheWorkspace) {
  const MlaShape lite = shape_of(16, 512, 128, 64, 128);
  const size_t ws = size_t{64} << 20;
  const int64_t per_token_one_split = 16 * (576 + 514) * 4;
  MlaSplitPlan plan = mla_split_plan(1, lite, ws, 132);
  EXPECT_EQ(plan.splits, kMlaMaxSplits);
  EXPECT_EQ(plan.chunk_tokens, 1);
  plan = mla_split_plan(8, lite, ws, 132);  // 128 rows: 3 splits for 264 blocks
  EXPECT_EQ(plan.splits, 3);
  EXPECT_EQ(plan.chunk_tokens, 8);
  plan = mla_split_plan(4096, lite, ws, 132);  // a prefill: one split, chunks of the workspace
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.chunk_tokens, static_cast<int64_t>(ws) / per_token_one_split);
  EXPECT_LT(plan.chunk_tokens, 4096);
  plan = mla_split_plan(1, lite, 100 << 10, 132);  // 16 splits' scratch does not fit 100 KiB
  EXPECT_EQ(plan.splits, 1);
  EXPECT_EQ(plan.chunk_tokens, 1);
  EXPECT_EQ(mla_split_plan(1, lite, 1 << 10, 132).chunk_tokens, 0);
}

TEST(CudaMlaShape, RefusesALatentPastTheKernels) {
  EXPECT_TRUE(mla_shape_supported(shape_of(16, 512, 128, 64, 128)));
  EXPECT_FALSE(mla_shape_supported(shape_of(16, 1024, 128, 64, 128)));
  EXPECT_FALSE(mla_shape_supported(shape_of(16, 512, 128, 63, 128)));
  EXPECT_FALSE(mla_shape_supported(shape_of(16, 512, 2048, 64, 128)));
}

INSTANTIATE_TEST_SUITE_P(Types, CudaMla, ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         testing::dtype_param_name);

}  // namespace
}  // namespace ib::cuda
