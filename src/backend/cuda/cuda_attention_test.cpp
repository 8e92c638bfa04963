// Differential tests of rope_and_cache and paged attention (split-KV decode, the tensor-core
// decode kernel and flash prefill) against the CPU reference: GQA ratios 1/3/4/7/8, head_dim
// 64/96/128, block boundaries, contexts long enough to split along the keys, mixed prefill + decode
// batches, sliding windows, block-sparse patterns.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

using testing::Pair;
using testing::random_floats;
using testing::tolerance;
using testing::Twin;

class CudaAttention : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { IB_REQUIRE_CUDA(); }
};

struct SeqSpec {
  int context_len;
  int query_len;
};

struct Batch {
  Pair qkv;
  Pair k_cache, v_cache;
  Pair query_start, context_lens, block_tables;
  int num_seqs = 0, num_tokens = 0, max_query_len = 0, max_context_len = 0;
  int decode_prefix = 0;  // the leading one-token sequences (AttentionMetadata's hint)
  int block_size = 16;
  float k_scale = 1.0f, v_scale = 1.0f;  // an E4M3 cache's scales

  KvCacheLayer kv_cpu() const { return {k_cache.cpu, v_cache.cpu, block_size, k_scale, v_scale}; }
  KvCacheLayer kv_gpu() const { return {k_cache.gpu, v_cache.gpu, block_size, k_scale, v_scale}; }
  AttentionMetadata meta(bool gpu, int context_hint_slack = 0) const {
    AttentionMetadata m;
    m.num_seqs = num_seqs;
    m.num_tokens = num_tokens;
    m.query_start = gpu ? query_start.gpu : query_start.cpu;
    m.context_lens = gpu ? context_lens.gpu : context_lens.cpu;
    m.block_tables = gpu ? block_tables.gpu : block_tables.cpu;
    m.max_query_len = max_query_len;
    m.max_context_len = max_context_len + context_hint_slack;
    m.decode_prefix = decode_prefix;
    return m;
  }
};

// Random q/k/v and a cache whose blocks are handed to the sequences in shuffled order; with
// fp8_cache, the cache holds E4M3 bytes (the same on both sides) with k_scale 0.01, v_scale 0.004.
Batch make_batch(Twin& twin, Rng& rng, const std::vector<SeqSpec>& seqs, const AttentionShape& s,
                 int block_size, bool fp8_cache = false) {
  Batch b;
  b.block_size = block_size;
  b.num_seqs = static_cast<int>(seqs.size());
  std::vector<int32_t> query_start{0}, context_lens;
  int max_blocks = 1, total_blocks = 3;  // a few spare blocks nobody owns
  for (const auto& q : seqs) {
    query_start.push_back(query_start.back() + q.query_len);
    context_lens.push_back(q.context_len);
    const int blocks = (q.context_len + block_size - 1) / block_size;
    max_blocks = std::max(max_blocks, blocks);
    total_blocks += blocks;
    b.max_query_len = std::max(b.max_query_len, q.query_len);
    b.max_context_len = std::max(b.max_context_len, q.context_len);
  }
  b.num_tokens = query_start.back();
  while (b.decode_prefix < b.num_seqs && seqs[static_cast<size_t>(b.decode_prefix)].query_len == 1)
    ++b.decode_prefix;
  std::vector<int32_t> ids(static_cast<size_t>(total_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  std::vector<int32_t> table(static_cast<size_t>(b.num_seqs * max_blocks), -1);
  size_t next = 0;
  for (int i = 0; i < b.num_seqs; ++i) {
    const int blocks = (seqs[static_cast<size_t>(i)].context_len + block_size - 1) / block_size;
    for (int j = 0; j < blocks; ++j) table[static_cast<size_t>(i * max_blocks + j)] = ids[next++];
  }
  const int64_t row = int64_t{s.num_heads + 2 * s.num_kv_heads} * s.head_dim;
  const int64_t cache = int64_t{total_blocks} * s.num_kv_heads * block_size * s.head_dim;
  b.qkv = twin.floats({b.num_tokens, row}, random_floats(rng, b.num_tokens * row, -2, 2));
  if (fp8_cache) {
    b.k_scale = 0.01f;
    b.v_scale = 0.004f;
    b.k_cache = twin.bytes(DType::kF8E4M3, {total_blocks, s.num_kv_heads, block_size, s.head_dim},
                           testing::random_e4m3(rng, cache, b.k_scale));
    b.v_cache = twin.bytes(DType::kF8E4M3, {total_blocks, s.num_kv_heads, block_size, s.head_dim},
                           testing::random_e4m3(rng, cache, b.v_scale, -1, 1));
  } else {
    b.k_cache = twin.floats({total_blocks, s.num_kv_heads, block_size, s.head_dim},
                            random_floats(rng, cache, -2, 2));
    b.v_cache = twin.floats({total_blocks, s.num_kv_heads, block_size, s.head_dim},
                            random_floats(rng, cache));
  }
  b.query_start = twin.ints({b.num_seqs + 1}, query_start);
  b.context_lens = twin.ints({b.num_seqs}, context_lens);
  b.block_tables = twin.ints({b.num_seqs, max_blocks}, table);
  return b;
}

AttentionShape shape_of(int hq, int hkv, int hd, int window = 0) {
  return {hq, hkv, hd, 1.0f / std::sqrt(static_cast<float>(hd)), window};
}

// Runs attention on both sides through `path` and returns the relative L2 error: the largest of
// the split-KV decode's forms (IB_ATTN_LEAN 0, 1 and 2; the lean forms run where they exist:
// bf16/fp16 caches, head_dim 64 or 128, groups of up to 4, few blocks).
double attention_error(Twin& twin, const Batch& b, const AttentionShape& s, AttentionPath path,
                       int context_hint_slack = 0) {
  Pair out = twin.output({b.num_tokens, int64_t{s.num_heads} * s.head_dim});
  twin.gpu().set_attention_path(path);
  twin.cpu().attention(b.qkv.cpu, b.kv_cpu(), b.meta(false), s, out.cpu);
  double worst = 0.0;
  const int saved = twin.gpu().attention_lean();
  for (const int lean : {0, 1, 2}) {
    twin.gpu().set_attention_lean(lean);
    twin.gpu().attention(b.qkv.gpu, b.kv_gpu(), b.meta(true, context_hint_slack), s, out.gpu);
    worst = std::max(worst, twin.error(out));
  }
  twin.gpu().set_attention_lean(saved);
  twin.gpu().set_attention_path(AttentionPath::kAuto);
  return worst;
}

const std::vector<AttentionShape>& shapes() {
  // Gemma-2-9B's 16 heads over 8 KV heads of 256, and head_dim 256 with groups of 8 (the
  // configuration that runs 4 warps).
  static const std::vector<AttentionShape> kShapes = {
      shape_of(8, 8, 64),   shape_of(16, 4, 128), shape_of(32, 4, 128), shape_of(12, 4, 96),
      shape_of(28, 4, 128), shape_of(16, 8, 256), shape_of(16, 2, 256)};
  return kShapes;
}

void check_batches(Twin& twin, Rng& rng, const std::vector<std::vector<SeqSpec>>& batches,
                   int window, int block_size, bool fp8_cache = false, float softcap = 0,
                   BlockSparse sparse = {}) {
  for (const auto& base : shapes()) {
    AttentionShape s = base;
    s.sliding_window = window;
    s.logit_softcap = softcap;
    s.block_sparse = sparse;
    for (const auto& seqs : batches) {
      const Batch b = make_batch(twin, rng, seqs, s, block_size, fp8_cache);
      for (const AttentionPath path :
           {AttentionPath::kAuto, AttentionPath::kSplitKv, AttentionPath::kFlash}) {
        EXPECT_LT(attention_error(twin, b, s, path), tolerance(twin.dtype()))
            << "Hq=" << s.num_heads << " Hkv=" << s.num_kv_heads << " hd=" << s.head_dim
            << " window=" << window << " softcap=" << softcap << " fp8 cache " << fp8_cache
            << " sparse " << sparse.block_size << "/" << sparse.local_blocks << "/"
            << sparse.vert_stride << " seqs=" << seqs.size() << " first ctx " << seqs[0].context_len
            << " q " << seqs[0].query_len << " path " << static_cast<int>(path);
      }
    }
  }
}

TEST_P(CudaAttention, DecodeAcrossBlockBoundaries) {
  Twin twin(GetParam());
  Rng rng(11);
  check_batches(twin, rng, {{{1, 1}, {16, 1}, {17, 1}, {200, 1}, {513, 1}}, {{33, 1}}}, 0, 16);
}

// The tensor-core decode kernel (IB_ATTN_MMA; here for every decode-only step): contexts of 1 to
// 1,000 keys (64-key tiles, partial last ones, a cache block straddling a tile), sliding windows
// of 32 and 100 (a window's first key inside a warp's 16), soft-capped logits, cache blocks of 16
// and 32, bf16/fp16 and E4M3 caches, every shape of shapes() (groups of 1 to 8; head_dim 256
// keeps the split-KV kernel), E4M3 with and without IB_ATTN_E4M3_F16, a block per item and 1-5
// blocks taking every item in turn (IB_ATTN_MMA_PERSIST's form), against the CPU; and it ran, E4M3
// included.
TEST_P(CudaAttention, DecodeOnTensorCores) {
  Twin twin(GetParam());
  Rng rng(31);
  const int saved = twin.gpu().attention_mma_min_seqs();
  twin.gpu().set_attention_mma_min_seqs(1);
  const int64_t before = twin.gpu().attention_mma_launches();
  const std::vector<std::vector<SeqSpec>> batches = {
      {{1, 1}, {16, 1}, {17, 1}, {64, 1}, {65, 1}, {200, 1}, {513, 1}}, {{1000, 1}, {33, 1}}};
  check_batches(twin, rng, batches, 0, 16);
  check_batches(twin, rng, batches, 32, 16);
  check_batches(twin, rng, batches, 100, 32);
  check_batches(twin, rng, batches, 0, 16, false, 1.5f);
  const int64_t before_e4m3 = twin.gpu().attention_mma_launches();
  check_batches(twin, rng, batches, 0, 16, true);
  check_batches(twin, rng, batches, 100, 32, true);
  check_batches(twin, rng, batches, 0, 16, true, 1.5f);
  // IB_ATTN_E4M3_F16: a bf16 model's MMAs over the E4M3 cache in fp16 (fp16 models' already are);
  // above, its default.
  const bool saved_f16 = twin.gpu().attention_e4m3_f16();
  twin.gpu().set_attention_e4m3_f16(!saved_f16);
  check_batches(twin, rng, batches, 0, 16, true);
  check_batches(twin, rng, batches, 100, 32, true);
  twin.gpu().set_attention_e4m3_f16(true);
  // A few blocks, each taking items in turn: single-tile items back to back (the next item's Q
  // loads while the current one's is in registers), windows, both caches, both MMA elements.
  for (const int blocks : {1, 2, 5}) {
    twin.gpu().set_attention_mma_blocks(blocks);
    check_batches(twin, rng, batches, 0, 16);
    check_batches(twin, rng, batches, 100, 32);
    check_batches(twin, rng, batches, 0, 16, true);
    check_batches(twin, rng, batches, 32, 16, true, 1.5f);
  }
  twin.gpu().set_attention_e4m3_f16(false);
  twin.gpu().set_attention_mma_blocks(3);
  check_batches(twin, rng, batches, 0, 16, true);
  twin.gpu().set_attention_mma_blocks(0);
  twin.gpu().set_attention_e4m3_f16(saved_f16);
  if (GetParam() != DType::kF32) {
    EXPECT_GT(before_e4m3, before);
    EXPECT_GT(twin.gpu().attention_mma_launches(), before_e4m3);
  }
  twin.gpu().set_attention_mma_min_seqs(saved);
}

TEST_P(CudaAttention, LongContextDecodeSplitsAlongKeys) {
  Twin twin(GetParam());
  Rng rng(12);
  const AttentionShape s = shape_of(32, 8, 128);
  const Batch b = make_batch(twin, rng, {{5000, 1}, {3001, 1}}, s, 16);
  const AttentionMetadata meta = b.meta(true);
  // The partition size this batch gets must give several partitions (split-KV + merge).
  const int partition =
      split_kv_partition_size(meta, s, CudaBackend::kAttentionWorkspaceBytes, twin.gpu().num_sms());
  EXPECT_LT(partition, 5000 / 4);
  EXPECT_LT(attention_error(twin, b, s, AttentionPath::kSplitKv), tolerance(GetParam()));
  // A context hint far above the real lengths (a graph captured for longer contexts) is fine.
  EXPECT_LT(attention_error(twin, b, s, AttentionPath::kSplitKv, 20000), tolerance(GetParam()));
}

// Short and long contexts under the hint of a graph captured for 8,192-token contexts: each
// query spreads its keys over the grid's partitions by its own length (at least 256 keys each;
// several partitions merged in the kernel for the 1,000-token one), and must match the CPU.
TEST_P(CudaAttention, ShortContextsUnderALongContextHint) {
  Twin twin(GetParam());
  Rng rng(18);
  for (const AttentionShape& s :
       {shape_of(32, 8, 128), shape_of(28, 4, 128), shape_of(8, 8, 64), shape_of(12, 4, 96)}) {
    for (const std::vector<SeqSpec>& seqs :
         std::vector<std::vector<SeqSpec>>{{{160, 1}},
                                           {{1, 1}, {15, 1}, {64, 1}, {65, 1}, {129, 1}, {1000, 1}},
                                           std::vector<SeqSpec>(8, SeqSpec{161, 1})}) {
      const Batch b = make_batch(twin, rng, seqs, s, 16);
      EXPECT_LT(attention_error(twin, b, s, AttentionPath::kSplitKv, 8192 - b.max_context_len),
                tolerance(GetParam()))
          << "Hq=" << s.num_heads << " Hkv=" << s.num_kv_heads << " hd=" << s.head_dim
          << " seqs=" << seqs.size();
    }
  }
}

// The L2 prefetch of each block's K and V rows is a hint: bit-identical output, in both the
// 8-warp (few blocks) and the 4-warp (many blocks) configuration, one and several partitions.
TEST_P(CudaAttention, KvPrefetchChangesNoResult) {
  Twin twin(GetParam());
  Rng rng(19);
  const AttentionShape s = shape_of(32, 8, 128);
  for (const std::vector<SeqSpec>& seqs : std::vector<std::vector<SeqSpec>>{
           {{160, 1}}, {{1, 1}, {15, 1}, {1000, 1}}, std::vector<SeqSpec>(64, SeqSpec{300, 1})}) {
    const Batch b = make_batch(twin, rng, seqs, s, 16);
    Pair off = twin.output({b.num_tokens, int64_t{s.num_heads} * s.head_dim});
    Pair on = twin.output({b.num_tokens, int64_t{s.num_heads} * s.head_dim});
    twin.gpu().set_attention_path(AttentionPath::kSplitKv);
    twin.gpu().set_attention_prefetch_max_seqs(0);
    twin.gpu().attention(b.qkv.gpu, b.kv_gpu(), b.meta(true), s, off.gpu);
    twin.gpu().set_attention_prefetch_max_seqs(1 << 20);
    twin.gpu().attention(b.qkv.gpu, b.kv_gpu(), b.meta(true), s, on.gpu);
    twin.gpu().set_attention_prefetch_max_seqs(8);
    twin.gpu().set_attention_path(AttentionPath::kAuto);
    twin.cpu().attention(b.qkv.cpu, b.kv_cpu(), b.meta(false), s, on.cpu);
    EXPECT_EQ(twin.gpu_floats(on.gpu), twin.gpu_floats(off.gpu)) << "seqs=" << seqs.size();
    EXPECT_LT(twin.error(on), tolerance(GetParam())) << "seqs=" << seqs.size();
  }
}

// IB_ATTN_LEAN: the lean form runs for the few-block decode of bf16/fp16 caches at head_dim 64
// or 128 with groups of up to 4 (Llama-3-8B's 32 / 8 at batch 8, under a graph's 8,192-token
// hint), and nowhere else: fp32, head_dim 96 or 256, groups of 8, many blocks. (attention_error
// checks its results in every test of this file.)
TEST_P(CudaAttention, LeanFormRunsWhereItExists) {
  Twin twin(GetParam());
  Rng rng(23);
  const bool half = GetParam() != DType::kF32;
  struct Shape {
    AttentionShape shape;
    int seqs;
    bool lean;
  };
  for (const Shape& k :
       {Shape{shape_of(32, 8, 128), 8, half}, Shape{shape_of(8, 8, 64), 1, half},
        Shape{shape_of(12, 4, 96), 1, false}, Shape{shape_of(16, 8, 256), 1, false},
        Shape{shape_of(64, 8, 128), 1, false}, Shape{shape_of(32, 8, 128), 64, false}}) {
    const Batch b =
        make_batch(twin, rng, std::vector<SeqSpec>(k.seqs, SeqSpec{161, 1}), k.shape, 16);
    const int64_t before = twin.gpu().attention_lean_launches();
    EXPECT_LT(attention_error(twin, b, k.shape, AttentionPath::kSplitKv, 8192 - 161),
              tolerance(GetParam()));
    EXPECT_EQ(twin.gpu().attention_lean_launches() - before, k.lean ? 2 : 0)
        << "Hq=" << k.shape.num_heads << " Hkv=" << k.shape.num_kv_heads
        << " hd=" << k.shape.head_dim << " seqs=" << k.seqs;
  }
}

TEST_P(CudaAttention, PrefillCausal) {
  Twin twin(GetParam());
  Rng rng(13);
  check_batches(twin, rng, {{{15, 15}, {64, 64}, {65, 65}}, {{300, 300}}, {{1, 1}, {130, 130}}}, 0,
                16);
}

TEST_P(CudaAttention, MixedPrefillChunksAndDecodes) {
  Twin twin(GetParam());
  Rng rng(14);
  check_batches(twin, rng, {{{40, 1}, {100, 37}, {16, 16}, {700, 129}}}, 0, 16);
}

// IB_ATTN_MIXED: a mixed batch's leading one-token sequences on the decode kernels (split-KV,
// and the tensor-core kernel where it takes the shape), the prefill chunks after them on the flash
// kernel, against the CPU: windows, soft-capping and an E4M3 cache (split-KV only) included; and
// the split ran.
TEST_P(CudaAttention, MixedBatchRunsItsDecodePrefixApart) {
  Twin twin(GetParam());
  Rng rng(24);
  const int saved_mixed = twin.gpu().attention_mixed_min_seqs();
  const int saved_mma = twin.gpu().attention_mma_min_seqs();
  twin.gpu().set_attention_mixed_min_seqs(1);
  const int64_t before = twin.gpu().attention_mixed_launches();
  const std::vector<std::vector<SeqSpec>> batches = {
      {{40, 1}, {1, 1}, {513, 1}, {100, 37}, {16, 16}, {700, 129}, {3, 1}}, {{65, 1}, {130, 130}}};
  for (const int mma : {0, 1}) {
    twin.gpu().set_attention_mma_min_seqs(mma);
    check_batches(twin, rng, batches, 0, 16);
    check_batches(twin, rng, batches, 32, 16);
    check_batches(twin, rng, batches, 0, 16, false, 1.5f);
  }
  check_batches(twin, rng, batches, 0, 16, true);
  if (GetParam() != DType::kF32) {
    EXPECT_GT(twin.gpu().attention_mixed_launches(), before);
  }
  twin.gpu().set_attention_mma_min_seqs(saved_mma);
  twin.gpu().set_attention_mixed_min_seqs(saved_mixed);
}

TEST_P(CudaAttention, SlidingWindow) {
  Twin twin(GetParam());
  Rng rng(15);
  check_batches(twin, rng, {{{300, 300}, {90, 1}}, {{700, 129}, {1000, 1}}}, 32, 16);
  check_batches(twin, rng, {{{260, 200}, {513, 1}}}, 100, 16);
}

// Gemma-2's attn_logit_softcapping, with and without its local layers' window. A cap of 1.5
// bends scores of unit scale well into tanh's curve, so ignoring it fails (checked below).
TEST_P(CudaAttention, LogitSoftcap) {
  Twin twin(GetParam());
  Rng rng(21);
  const std::vector<std::vector<SeqSpec>> batches = {{{300, 300}, {90, 1}},
                                                     {{700, 129}, {1000, 1}, {16, 16}}};
  check_batches(twin, rng, batches, 0, 16, false, 1.5f);
  check_batches(twin, rng, batches, 64, 16, false, 1.5f);
  check_batches(twin, rng, {{{200, 1}, {513, 1}}}, 0, 16, true, 1.5f);  // E4M3 cache
  // The cap changes the result by far more than the tolerance: the check above can fail.
  const AttentionShape capped = [] {
    AttentionShape s = shape_of(16, 4, 128);
    s.logit_softcap = 1.5f;
    return s;
  }();
  const Batch b = make_batch(twin, rng, {{300, 300}, {90, 1}}, capped, 16, false);
  Pair with = twin.output({b.num_tokens, int64_t{capped.num_heads} * capped.head_dim});
  Pair without = twin.output({b.num_tokens, int64_t{capped.num_heads} * capped.head_dim});
  AttentionShape plain = capped;
  plain.logit_softcap = 0;
  twin.cpu().attention(b.qkv.cpu, b.kv_cpu(), b.meta(false), capped, with.cpu);
  twin.cpu().attention(b.qkv.cpu, b.kv_cpu(), b.meta(false), plain, without.cpu);
  twin.gpu().attention(b.qkv.gpu, b.kv_gpu(), b.meta(true), capped, with.gpu);
  twin.gpu().attention(b.qkv.gpu, b.kv_gpu(), b.meta(true), plain, without.gpu);
  EXPECT_LT(twin.error(with), tolerance(GetParam()));
  EXPECT_GT(testing::rel_l2(twin.cpu_floats(with.cpu), twin.cpu_floats(without.cpu)),
            10 * tolerance(GetParam()));
}

// Local + strided block-sparse attention (backend/block_sparse.h): blocks of 64 (the flash
// kernel's key tile), of 16 and of 100 (which no tile aligns with); prefill from the first token
// and in chunks that start mid-block; decodes long enough to split along their visible keys,
// also under a graph's long-context hint; an E4M3 cache. The pattern changes the result by far
// more than the tolerance, so the checks can fail.
TEST_P(CudaAttention, BlockSparse) {
  Twin twin(GetParam());
  Rng rng(23);
  check_batches(
      twin, rng,
      {{{700, 700}, {1000, 1}}, {{1500, 129}, {3000, 1}, {64, 64}}, {{5000, 1}, {4097, 1}}}, 0, 16,
      false, 0, {64, 3, 4});
  check_batches(twin, rng, {{{600, 600}, {777, 1}}}, 0, 16, false, 0, {16, 2, 5});
  check_batches(twin, rng, {{{900, 250}, {1200, 1}}}, 0, 16, false, 0, {100, 2, 3});
  check_batches(twin, rng, {{{700, 129}, {3000, 1}}}, 0, 16, true, 0, {64, 2, 3});
  AttentionShape sparse = shape_of(32, 8, 128);
  sparse.block_sparse = {64, 2, 3};
  const Batch b = make_batch(twin, rng, {{6000, 1}, {2000, 300}}, sparse, 16);
  EXPECT_LT(attention_error(twin, b, sparse, AttentionPath::kSplitKv, 8192 - b.max_context_len),
            tolerance(GetParam()));
  Pair with = twin.output({b.num_tokens, int64_t{sparse.num_heads} * sparse.head_dim});
  Pair without = twin.output({b.num_tokens, int64_t{sparse.num_heads} * sparse.head_dim});
  AttentionShape dense = sparse;
  dense.block_sparse = {};
  twin.cpu().attention(b.qkv.cpu, b.kv_cpu(), b.meta(false), sparse, with.cpu);
  twin.cpu().attention(b.qkv.cpu, b.kv_cpu(), b.meta(false), dense, without.cpu);
  EXPECT_GT(testing::rel_l2(twin.cpu_floats(with.cpu), twin.cpu_floats(without.cpu)),
            10 * tolerance(GetParam()));
}

TEST_P(CudaAttention, OtherBlockSizes) {
  Twin twin(GetParam());
  Rng rng(16);
  check_batches(twin, rng, {{{77, 77}, {50, 1}}}, 0, 8);
  check_batches(twin, rng, {{{150, 20}, {300, 1}}}, 0, 32);
}

// The rope_and_cache form under test (IB_ROPE_VEC), restored at the end.
struct RopeVecGuard {
  bool saved = rope_vec();
  ~RopeVecGuard() { set_rope_vec(saved); }
};

// rope_and_cache's inputs for shape s: t tokens of qkv in [-2, 2), positions in [0, 8192), slots
// shuffled over 6 blocks of 16 with tokens 3 and 20 unwritten (-1), Llama-3's inverse frequencies,
// and the caches' values before (random E4M3 bytes with fp8_cache, else random values of the
// dtype), all on the host, so that each call can start from the same state.
struct RopeInputs {
  int64_t t = 37, blocks = 6, bs = 16, row = 0, cache = 0;
  std::vector<float> qkv, k_values, v_values, inv_freq;
  std::vector<uint8_t> k_before, v_before;
  std::vector<int32_t> positions, slots;
  float k_scale = 1.0f, v_scale = 1.0f;
};

RopeInputs rope_inputs(Rng& rng, const AttentionShape& s, bool fp8_cache) {
  RopeInputs in;
  const int64_t hd = s.head_dim;
  in.row = int64_t{s.num_heads + 2 * s.num_kv_heads} * hd;
  in.cache = in.blocks * s.num_kv_heads * in.bs * hd;
  in.qkv = random_floats(rng, in.t * in.row, -2, 2);
  in.k_scale = fp8_cache ? 0.02f : 1.0f;
  in.v_scale = fp8_cache ? 0.01f : 1.0f;
  in.k_before = testing::random_e4m3(rng, in.cache, in.k_scale);
  in.v_before = testing::random_e4m3(rng, in.cache, in.v_scale);
  in.k_values = random_floats(rng, in.cache);
  in.v_values = random_floats(rng, in.cache);
  in.positions.resize(static_cast<size_t>(in.t));
  for (auto& p : in.positions) p = static_cast<int32_t>(rng.uniform_int(0, 8191));
  in.slots.resize(static_cast<size_t>(in.blocks * in.bs));
  std::iota(in.slots.begin(), in.slots.end(), 0);
  std::shuffle(in.slots.begin(), in.slots.end(), rng);
  in.slots.resize(static_cast<size_t>(in.t));
  in.slots[3] = -1;
  in.slots[20] = -1;
  in.inv_freq.resize(static_cast<size_t>(hd / 2));
  for (size_t i = 0; i < in.inv_freq.size(); ++i)
    in.inv_freq[i] = static_cast<float>(
        std::pow(500000.0, -2.0 * static_cast<double>(i) / static_cast<double>(hd)));
  return in;
}

// One rope_and_cache call on both sides from in's state: qkv, k and v after it.
struct RopeOutputs {
  Pair qkv, k, v;
};

RopeOutputs run_rope_and_cache(Twin& twin, const RopeInputs& in, const AttentionShape& s,
                               bool fp8_cache) {
  const int64_t hd = s.head_dim;
  const auto cache_pair = [&](const std::vector<uint8_t>& before,
                              const std::vector<float>& values) {
    return fp8_cache ? twin.bytes(DType::kF8E4M3, {in.blocks, s.num_kv_heads, in.bs, hd}, before)
                     : twin.floats({in.blocks, s.num_kv_heads, in.bs, hd}, values);
  };
  RopeOutputs out{twin.floats({in.t, in.row}, in.qkv), cache_pair(in.k_before, in.k_values),
                  cache_pair(in.v_before, in.v_values)};
  Pair pos = twin.ints({in.t}, in.positions);
  Pair slot = twin.ints({in.t}, in.slots);
  Pair freq = twin.floats({hd / 2}, in.inv_freq, DType::kF32);
  twin.cpu().rope_and_cache(out.qkv.cpu, pos.cpu, slot.cpu, freq.cpu,
                            {out.k.cpu, out.v.cpu, 16, in.k_scale, in.v_scale}, s);
  twin.gpu().rope_and_cache(out.qkv.gpu, pos.gpu, slot.gpu, freq.gpu,
                            {out.k.gpu, out.v.gpu, 16, in.k_scale, in.v_scale}, s);
  return out;
}

// rope_and_cache on both sides, in each form (IB_ROPE_VEC off and on); with fp8_cache the cache
// is E4M3 (k_scale 0.02, v_scale 0.01) and checked by expect_e4m3_cache_written, otherwise
// against the CPU's within the tolerance.
void check_rope_and_cache(Twin& twin, Rng& rng, bool fp8_cache) {
  RopeVecGuard guard;
  for (const bool vec : {false, true}) {
    set_rope_vec(vec);
    for (const auto& s : shapes()) {
      const RopeInputs in = rope_inputs(rng, s, fp8_cache);
      const RopeOutputs out = run_rope_and_cache(twin, in, s, fp8_cache);
      const int hd = s.head_dim;
      EXPECT_LT(twin.error(out.qkv), tolerance(twin.dtype())) << "qkv hd=" << hd << " vec=" << vec;
      if (fp8_cache) {
        testing::expect_e4m3_cache_written(twin, out.k, out.qkv, in.k_before, in.slots, s, 16,
                                           false, in.k_scale);
        testing::expect_e4m3_cache_written(twin, out.v, out.qkv, in.v_before, in.slots, s, 16, true,
                                           in.v_scale);
      } else {
        EXPECT_LT(twin.error(out.k), tolerance(twin.dtype())) << "k cache hd=" << hd;
        EXPECT_EQ(twin.error(out.v), 0.0) << "v cache hd=" << hd;
      }
    }
  }
}

TEST_P(CudaAttention, RopeAndCacheMatchesCpu) {
  Twin twin(GetParam());
  Rng rng(17);
  check_rope_and_cache(twin, rng, false);
}

// --kv-cache-dtype fp8 (backend/ops.h, KvCacheLayer): the cache written as E4M3 and read by both
// attention kernels. The values read are exact in every act dtype, so the attention tolerance is
// the dense one.
TEST_P(CudaAttention, RopeAndCacheWritesE4m3Cache) {
  Twin twin(GetParam());
  Rng rng(20);
  check_rope_and_cache(twin, rng, true);
}

// IB_ROPE_VEC: the vector form computes each pair as the pair form does, so qkv and both caches
// (act and E4M3) equal the pair form's bit for bit, for every shape (head_dim 64, 96, 128 and
// 256: whole vectors a half in every dtype), and a launch counter proves the vector form ran.
TEST_P(CudaAttention, RopeAndCacheVectorFormEqualsThePairForm) {
  RopeVecGuard guard;
  Twin twin(GetParam());
  Rng rng(21);
  for (const bool fp8_cache : {false, true}) {
    for (const auto& s : shapes()) {
      const RopeInputs in = rope_inputs(rng, s, fp8_cache);
      set_rope_vec(false);
      const int64_t before = rope_vec_launches();
      const RopeOutputs pair = run_rope_and_cache(twin, in, s, fp8_cache);
      EXPECT_EQ(rope_vec_launches(), before);
      set_rope_vec(true);
      const RopeOutputs vec = run_rope_and_cache(twin, in, s, fp8_cache);
      EXPECT_EQ(rope_vec_launches(), before + 1);
      const std::string what =
          "hd=" + std::to_string(s.head_dim) + (fp8_cache ? " e4m3 cache" : " act cache");
      EXPECT_EQ(twin.gpu_floats(vec.qkv.gpu), twin.gpu_floats(pair.qkv.gpu)) << what;
      if (fp8_cache) {
        EXPECT_EQ(twin.host_ints<uint8_t>(twin.gpu(), vec.k.gpu),
                  twin.host_ints<uint8_t>(twin.gpu(), pair.k.gpu))
            << what;
        EXPECT_EQ(twin.host_ints<uint8_t>(twin.gpu(), vec.v.gpu),
                  twin.host_ints<uint8_t>(twin.gpu(), pair.v.gpu))
            << what;
      } else {
        EXPECT_EQ(twin.gpu_floats(vec.k.gpu), twin.gpu_floats(pair.k.gpu)) << what;
        EXPECT_EQ(twin.gpu_floats(vec.v.gpu), twin.gpu_floats(pair.v.gpu)) << what;
      }
    }
  }
}

TEST_P(CudaAttention, E4m3CacheDecodePrefillMixedAndWindows) {
  Twin twin(GetParam());
  Rng rng(21);
  check_batches(twin, rng, {{{1, 1}, {17, 1}, {513, 1}}, {{15, 15}, {65, 65}}}, 0, 16, true);
  check_batches(twin, rng, {{{40, 1}, {100, 37}, {700, 129}}}, 0, 16, true);
  check_batches(twin, rng, {{{300, 300}, {90, 1}}, {{1000, 1}}}, 32, 16, true);
}

TEST_P(CudaAttention, E4m3CacheLongContextSplitsAlongKeys) {
  Twin twin(GetParam());
  Rng rng(22);
  const AttentionShape s = shape_of(32, 8, 128);
  const Batch b = make_batch(twin, rng, {{5000, 1}, {3001, 1}}, s, 16, true);
  EXPECT_LT(attention_error(twin, b, s, AttentionPath::kSplitKv), tolerance(GetParam()));
  EXPECT_LT(attention_error(twin, b, s, AttentionPath::kSplitKv, 8192), tolerance(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttention,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                         testing::dtype_param_name);

}  // namespace
}  // namespace ib::cuda
