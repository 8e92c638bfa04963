// rope_and_cache and paged attention against double-precision references over contiguous K/V.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/test_tensors.h"

namespace ib {
namespace {

using testing::random_floats;
using testing::TensorArena;

TEST(CpuRopeAndCache, RotatesQkAndWritesCacheSlots) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(21);
  const AttentionShape shape{4, 2, 8, 0.5f, 0};
  const int64_t t = 6, hd = 8, half = 4, row = (4 + 2 * 2) * hd, blocks = 5, bs = 4;
  const auto qkv_v = random_floats(rng, t * row);
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(
        std::pow(10000.0, -2.0 * static_cast<double>(i) / static_cast<double>(hd)));
  }
  const std::vector<int32_t> positions = {0, 1, 7, 4095, 123, 9};
  const std::vector<int32_t> slots = {0, 5, -1, 19, 7, 12};
  Tensor qkv = arena.f32({t, row}, qkv_v);
  KvCacheLayer kv{arena.f32({blocks, 2, bs, hd}, std::vector<float>(blocks * 2 * bs * hd, 9.0f)),
                  arena.f32({blocks, 2, bs, hd}, std::vector<float>(blocks * 2 * bs * hd, 9.0f)),
                  static_cast<int>(bs)};
  backend.rope_and_cache(qkv, arena.i32({t}, positions), arena.i32({t}, slots),
                         arena.f32({half}, inv_freq), kv, shape);
  const auto out = arena.to_host(qkv);
  const auto kc = arena.to_host(kv.k);
  const auto vc = arena.to_host(kv.v);
  std::vector<bool> written(static_cast<size_t>(blocks * bs), false);
  for (int64_t tok = 0; tok < t; ++tok) {
    for (int64_t h = 0; h < 8; ++h) {  // 4 q heads, 2 k heads, 2 v heads
      for (int64_t i = 0; i < half; ++i) {
        const auto base = static_cast<size_t>(tok * row + h * hd);
        const double x1 = qkv_v[base + static_cast<size_t>(i)];
        const double x2 = qkv_v[base + static_cast<size_t>(i + half)];
        double r1 = x1, r2 = x2;
        if (h < 6) {  // q and k rotate, v does not
          const float angle = static_cast<float>(positions[static_cast<size_t>(tok)]) *
                              inv_freq[static_cast<size_t>(i)];
          r1 = x1 * std::cos(double{angle}) - x2 * std::sin(double{angle});
          r2 = x2 * std::cos(double{angle}) + x1 * std::sin(double{angle});
        }
        EXPECT_NEAR(out[base + static_cast<size_t>(i)], r1, 2e-6);
        EXPECT_NEAR(out[base + static_cast<size_t>(i + half)], r2, 2e-6);
      }
    }
    const int32_t slot = slots[static_cast<size_t>(tok)];
    if (slot < 0) continue;
    written[static_cast<size_t>(slot)] = true;
    for (int64_t g = 0; g < 2; ++g) {
      for (int64_t d = 0; d < hd; ++d) {
        const auto c = static_cast<size_t>(((slot / bs * 2 + g) * bs + slot % bs) * hd + d);
        EXPECT_EQ(kc[c], out[static_cast<size_t>(tok * row + (4 + g) * hd + d)]);
        EXPECT_EQ(vc[c], qkv_v[static_cast<size_t>(tok * row + (6 + g) * hd + d)]);
      }
    }
  }
  // Untouched slots keep their old contents.
  for (int64_t s = 0; s < blocks * bs; ++s) {
    if (written[static_cast<size_t>(s)]) continue;
    EXPECT_EQ(kc[static_cast<size_t>(((s / bs * 2) * bs + s % bs) * hd)], 9.0f);
  }
}

struct SeqSpec {
  int context_len;
  int query_len;
};

// A paged batch: sequences whose K/V sit in randomly placed blocks of a cache that holds
// garbage elsewhere, their contiguous K/V for references, and the metadata.
struct PagedCase {
  int64_t total_blocks = 0, max_blocks = 0, num_tokens = 0, row = 0;
  std::vector<float> k_cache, v_cache;           // (total_blocks, hkv, block_size, hd)
  std::vector<std::vector<float>> keys, values;  // per sequence (context, hkv, hd)
  std::vector<int32_t> tables, query_start = {0}, context_lens;
  std::vector<float> qkv;  // (num_tokens, row)
};

PagedCase make_case(const AttentionShape& shape, int block_size, const std::vector<SeqSpec>& seqs,
                    Rng& rng) {
  PagedCase c;
  const int64_t hq = shape.num_heads, hkv = shape.num_kv_heads, hd = shape.head_dim;
  c.row = (hq + 2 * hkv) * hd;
  const auto num_seqs = static_cast<int64_t>(seqs.size());
  for (const auto& s : seqs) {
    const int64_t b = (s.context_len + block_size - 1) / block_size;
    c.max_blocks = std::max(c.max_blocks, b);
    c.total_blocks += b;
    c.num_tokens += s.query_len;
  }
  c.total_blocks += 3;  // spare blocks that no sequence uses
  std::vector<int32_t> pool(static_cast<size_t>(c.total_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  for (size_t i = pool.size() - 1; i > 0; --i) {
    std::swap(pool[i], pool[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(i)))]);
  }
  const int64_t cache_elems = c.total_blocks * hkv * block_size * hd;
  c.k_cache = random_floats(rng, cache_elems, 50, 60);  // garbage where nothing was written
  c.v_cache = random_floats(rng, cache_elems, 50, 60);
  c.tables.assign(static_cast<size_t>(num_seqs * c.max_blocks), -1);
  size_t next_block = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const auto& spec = seqs[static_cast<size_t>(s)];
    c.keys.push_back(random_floats(rng, spec.context_len * hkv * hd, -2, 2));
    c.values.push_back(random_floats(rng, spec.context_len * hkv * hd));
    for (int64_t p = 0; p < spec.context_len; ++p) {
      const auto entry = static_cast<size_t>(s * c.max_blocks + p / block_size);
      if (p % block_size == 0) c.tables[entry] = pool[next_block++];
      const int64_t block = c.tables[entry];
      for (int64_t g = 0; g < hkv; ++g) {
        for (int64_t d = 0; d < hd; ++d) {
          const auto dst =
              static_cast<size_t>(((block * hkv + g) * block_size + p % block_size) * hd + d);
          const auto src = static_cast<size_t>((p * hkv + g) * hd + d);
          c.k_cache[dst] = c.keys.back()[src];
          c.v_cache[dst] = c.values.back()[src];
        }
      }
    }
    c.query_start.push_back(c.query_start.back() + spec.query_len);
    c.context_lens.push_back(spec.context_len);
  }
  c.qkv = random_floats(rng, c.num_tokens * c.row, -2, 2);
  return c;
}

// backend.attention of the case's queries over kv (shaped as the case's cache).
std::vector<float> run_attention(CpuBackend& backend, TensorArena& arena, const PagedCase& c,
                                 const KvCacheLayer& kv, const AttentionShape& shape,
                                 int decode_prefix = 0) {
  const auto num_seqs = static_cast<int64_t>(c.context_lens.size());
  AttentionMetadata meta;
  meta.num_seqs = static_cast<int>(num_seqs);
  meta.num_tokens = static_cast<int>(c.num_tokens);
  meta.query_start = arena.i32({num_seqs + 1}, c.query_start);
  meta.context_lens = arena.i32({num_seqs}, c.context_lens);
  meta.block_tables = arena.i32({num_seqs, c.max_blocks}, c.tables);
  meta.decode_prefix = decode_prefix;
  Tensor out = arena.empty(DType::kF32, {c.num_tokens, int64_t{shape.num_heads} * shape.head_dim});
  backend.attention(arena.f32({c.num_tokens, c.row}, c.qkv), kv, meta, shape, out);
  return arena.to_host(out);
}

// Paged attention over randomly placed blocks vs a double reference on contiguous K/V.
void check_attention(const AttentionShape& shape, int block_size, const std::vector<SeqSpec>& seqs,
                     uint64_t seed) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(seed);
  const int64_t hq = shape.num_heads, hkv = shape.num_kv_heads, hd = shape.head_dim;
  const PagedCase c = make_case(shape, block_size, seqs, rng);
  const auto num_seqs = static_cast<int64_t>(seqs.size());
  const int64_t row = c.row;
  const auto& query_start = c.query_start;
  const auto& qkv_v = c.qkv;
  KvCacheLayer kv{arena.f32({c.total_blocks, hkv, block_size, hd}, c.k_cache),
                  arena.f32({c.total_blocks, hkv, block_size, hd}, c.v_cache), block_size};
  const auto got = run_attention(backend, arena, c, kv, shape);

  for (int64_t s = 0; s < num_seqs; ++s) {
    const auto& spec = seqs[static_cast<size_t>(s)];
    const auto& ks = c.keys[static_cast<size_t>(s)];
    const auto& vs = c.values[static_cast<size_t>(s)];
    for (int64_t j = 0; j < spec.query_len; ++j) {
      const int64_t t = query_start[static_cast<size_t>(s)] + j;
      const int64_t pos = spec.context_len - spec.query_len + j;
      const int64_t first =
          shape.sliding_window > 0 ? std::max<int64_t>(0, pos - shape.sliding_window + 1) : 0;
      // The block-sparse pattern, spelled out here from its definition (vLLM's local +
      // vertical-stride layout) rather than through backend/block_sparse.h.
      const BlockSparse& b = shape.block_sparse;
      const auto visible = [&](int64_t p) {
        if (!b.enabled()) return true;
        const int64_t qb = pos / b.block_size, kb = p / b.block_size;
        return qb - kb < b.local_blocks || (kb + 1) % b.vert_stride == 0;
      };
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / (hq / hkv);
        std::vector<double> sc;
        for (int64_t p = first; p <= pos; ++p) {
          if (!visible(p)) {
            sc.push_back(-INFINITY);
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) {
            dot += double{qkv_v[static_cast<size_t>(t * row + h * hd + d)]} *
                   ks[static_cast<size_t>((p * hkv + g) * hd + d)];
          }
          double score = dot * shape.scale;
          if (shape.logit_softcap > 0)
            score = shape.logit_softcap * std::tanh(score / shape.logit_softcap);
          sc.push_back(score);
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double sum = 0;
        for (auto& x : sc) sum += (x = std::exp(x - mx));
        for (int64_t d = 0; d < hd; ++d) {
          double ref = 0;
          for (int64_t p = first; p <= pos; ++p) {
            ref += sc[static_cast<size_t>(p - first)] / sum *
                   vs[static_cast<size_t>((p * hkv + g) * hd + d)];
          }
          ASSERT_NEAR(got[static_cast<size_t>(t * hq * hd + h * hd + d)], ref, 2e-6)
              << "seq " << s << " query " << j << " head " << h << " dim " << d;
        }
      }
    }
  }
}

TEST(CpuAttention, PrefillAndDecodeMixedBatchWithGqa) {
  const AttentionShape shape{4, 2, 16, 0.25f, 0};
  check_attention(shape, 4, {{9, 9}, {17, 1}, {5, 2}, {1, 1}, {32, 7}}, 1);
}

// AttentionMetadata::decode_prefix (the leading one-token sequences, which the CUDA backend may
// run on its decode kernels): a true hint changes nothing, a false one aborts.
TEST(CpuAttention, DecodePrefixHintIsCheckedAndChangesNothing) {
  const AttentionShape shape{4, 2, 16, 0.25f, 0};
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(5);
  const PagedCase c = make_case(shape, 4, {{17, 1}, {3, 1}, {9, 9}, {1, 1}}, rng);
  KvCacheLayer kv{arena.f32({c.total_blocks, 2, 4, 16}, c.k_cache),
                  arena.f32({c.total_blocks, 2, 4, 16}, c.v_cache), 4};
  EXPECT_EQ(run_attention(backend, arena, c, kv, shape, 2),
            run_attention(backend, arena, c, kv, shape, 0));
  EXPECT_DEATH(run_attention(backend, arena, c, kv, shape, 3), "decode_prefix hint");
}

TEST(CpuAttention, MultiHeadAndMultiQueryGroupings) {
  check_attention({3, 3, 8, 0.35f, 0}, 16, {{40, 40}, {3, 1}}, 2);
  check_attention({8, 1, 8, 0.35f, 0}, 2, {{11, 4}, {6, 6}}, 3);
}

TEST(CpuAttention, SlidingWindowLimitsKeys) {
  check_attention({4, 2, 8, 0.35f, 5}, 4, {{20, 20}, {13, 1}, {9, 3}, {4, 4}}, 4);
  check_attention({2, 1, 6, 0.4f, 1}, 3, {{7, 7}}, 5);  // window 1: each token sees itself only
}

// Gemma-2's soft-capped scores (cap * tanh(score / cap)), with a scale large enough that the
// cap bites (raw scores of several caps), alone and with a sliding window.
TEST(CpuAttention, LogitSoftcapBoundsTheScores) {
  AttentionShape capped{4, 2, 16, 2.0f, 0};
  capped.logit_softcap = 1.5f;
  check_attention(capped, 4, {{9, 9}, {17, 1}, {5, 2}}, 6);
  capped.sliding_window = 4;
  check_attention(capped, 4, {{12, 12}, {10, 1}}, 7);
}

// Local + strided block-sparse attention: small blocks so that a few dozen tokens cross many
// of them; prefill chunks, decode rows and GQA groups in one batch.
TEST(CpuAttention, BlockSparseSeesTheLocalBandAndTheStridedBlocks) {
  AttentionShape shape{4, 2, 8, 0.35f, 0};
  shape.block_sparse = {4, 2, 3};  // blocks of 4 tokens, a band of 2 blocks, every 3rd block
  check_attention(shape, 4, {{60, 60}, {45, 1}, {37, 5}, {3, 3}}, 8);
  shape.block_sparse = {3, 1, 2};  // the band is the query's own block; cache blocks of 5
  check_attention(shape, 5, {{50, 50}, {29, 2}}, 9);
  shape.block_sparse = {8, 3, 1};  // every block is strided: dense attention
  check_attention(shape, 4, {{40, 40}, {33, 1}}, 10);
  shape.logit_softcap = 1.5f;
  shape.block_sparse = {5, 2, 4};
  check_attention(shape, 16, {{64, 64}, {41, 3}}, 11);
}

TEST(CpuAttention, RandomShapes) {
  Rng rng(99);
  for (int trial = 0; trial < 12; ++trial) {
    const int hkv = static_cast<int>(rng.uniform_int(1, 3));
    const int group = static_cast<int>(rng.uniform_int(1, 3));
    const int hd = 2 * static_cast<int>(rng.uniform_int(1, 12));
    const int window = trial % 3 == 0 ? static_cast<int>(rng.uniform_int(1, 20)) : 0;
    const AttentionShape shape{hkv * group, hkv, hd, static_cast<float>(1.0 / std::sqrt(hd)),
                               window};
    std::vector<SeqSpec> seqs;
    const int64_t n = rng.uniform_int(1, 5);
    for (int64_t s = 0; s < n; ++s) {
      const int ctx = static_cast<int>(rng.uniform_int(1, 60));
      seqs.push_back({ctx, static_cast<int>(rng.uniform_int(1, ctx))});
    }
    check_attention(shape, static_cast<int>(rng.uniform_int(1, 16)), seqs,
                    100 + static_cast<uint64_t>(trial));
  }
}

// The spacing of E4M3 values at |y| (2^-9 among the subnormals, below 2^-6).
double e4m3_step(double y) {
  const double a = std::fabs(y);
  if (a < std::ldexp(1.0, -6)) return std::ldexp(1.0, -9);
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 3);
}

TEST(CpuKvCacheFp8, RopeAndCacheStoresE4m3OfValueOverScale) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(31);
  const AttentionShape shape{4, 2, 16, 0.25f, 0};
  const int64_t t = 5, hd = 16, half = 8, row = (4 + 2 * 2) * hd, blocks = 3, bs = 4;
  const float k_scale = 0.037f, v_scale = 2.5f;
  auto qkv_v = random_floats(rng, t * row, -6, 6);
  qkv_v[static_cast<size_t>(row + 6 * hd + 3)] = 5000.0f;  // v / v_scale = 2000: saturates
  qkv_v[static_cast<size_t>(row + 6 * hd + 4)] = 1e-4f;    // v / v_scale a subnormal
  std::vector<float> inv_freq(half);
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[static_cast<size_t>(i)] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / 16.0f);
  }
  const std::vector<int32_t> positions = {0, 3, 17, 100, 5};
  const std::vector<int32_t> slots = {0, 6, 11, -1, 3};
  Tensor qkv = arena.f32({t, row}, qkv_v);
  const std::vector<uint8_t> zeros(static_cast<size_t>(blocks * 2 * bs * hd), 0);
  KvCacheLayer kv{arena.fp8({blocks, 2, bs, hd}, zeros), arena.fp8({blocks, 2, bs, hd}, zeros),
                  static_cast<int>(bs), k_scale, v_scale};
  backend.rope_and_cache(qkv, arena.i32({t}, positions), arena.i32({t}, slots),
                         arena.f32({half}, inv_freq), kv, shape);
  const auto out = arena.to_host(qkv);
  const auto kc = arena.to_host_bytes(kv.k);
  const auto vc = arena.to_host_bytes(kv.v);
  int saturated = 0;
  for (int64_t tok = 0; tok < t; ++tok) {
    const int32_t slot = slots[static_cast<size_t>(tok)];
    if (slot < 0) continue;
    for (int64_t g = 0; g < 2; ++g) {
      for (int64_t d = 0; d < hd; ++d) {
        const auto c = static_cast<size_t>(((slot / bs * 2 + g) * bs + slot % bs) * hd + d);
        for (const bool is_v : {false, true}) {
          const float x = out[static_cast<size_t>(tok * row + ((is_v ? 6 : 4) + g) * hd + d)];
          const float scale = is_v ? v_scale : k_scale;
          const uint8_t stored = is_v ? vc[c] : kc[c];
          ASSERT_EQ(stored, f32_to_f8e4m3_bits(x / scale)) << "token " << tok << " dim " << d;
          const double read = double{f8e4m3_bits_to_f32(stored)} * scale;
          if (std::fabs(x / scale) > kF8E4M3Max) {
            EXPECT_EQ(read, std::copysign(double{kF8E4M3Max} * scale, x));
            ++saturated;
          } else {
            EXPECT_LE(std::fabs(read - x), 0.5 * e4m3_step(x / scale) * scale * (1 + 1e-6))
                << "token " << tok << " dim " << d << (is_v ? " v" : " k");
          }
        }
      }
    }
  }
  EXPECT_EQ(saturated, 1);
}

// An fp8 cache is read as float(stored) * scale: attention over it is, bit for bit, attention
// over an fp32 cache holding those values (which check_attention compares with double).
TEST(CpuKvCacheFp8, AttentionEqualsAttentionOverTheDequantizedCache) {
  const struct {
    AttentionShape shape;
    int block_size;
    std::vector<SeqSpec> seqs;
  } cases[] = {{{4, 2, 16, 0.25f, 0}, 4, {{9, 9}, {17, 1}, {5, 2}, {32, 7}}},
               {{8, 1, 8, 0.35f, 0}, 16, {{40, 40}, {3, 1}}},
               {{4, 2, 8, 0.35f, 5}, 3, {{20, 20}, {13, 1}}}};
  for (const auto& tc : cases) {
    CpuBackend backend(2);
    TensorArena arena(backend);
    Rng rng(7);
    const PagedCase c = make_case(tc.shape, tc.block_size, tc.seqs, rng);
    const float k_scale = 0.02f, v_scale = 0.005f;
    const auto n = c.k_cache.size();
    std::vector<uint8_t> kq(n), vq(n);
    std::vector<float> kd(n), vd(n);
    for (size_t i = 0; i < n; ++i) {
      kq[i] = f32_to_f8e4m3_bits(c.k_cache[i] / k_scale);
      vq[i] = f32_to_f8e4m3_bits(c.v_cache[i] / v_scale);
      kd[i] = f8e4m3_bits_to_f32(kq[i]) * k_scale;
      vd[i] = f8e4m3_bits_to_f32(vq[i]) * v_scale;
    }
    const int64_t hkv = tc.shape.num_kv_heads, hd = tc.shape.head_dim;
    const KvCacheLayer fp8{arena.fp8({c.total_blocks, hkv, tc.block_size, hd}, kq),
                           arena.fp8({c.total_blocks, hkv, tc.block_size, hd}, vq), tc.block_size,
                           k_scale, v_scale};
    const KvCacheLayer dequantized{arena.f32({c.total_blocks, hkv, tc.block_size, hd}, kd),
                                   arena.f32({c.total_blocks, hkv, tc.block_size, hd}, vd),
                                   tc.block_size};
    EXPECT_EQ(run_attention(backend, arena, c, fp8, tc.shape),
              run_attention(backend, arena, c, dequantized, tc.shape));
  }
}

}  // namespace
}  // namespace ib
