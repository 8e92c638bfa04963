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

// Paged attention over randomly placed blocks vs a double reference on contiguous K/V.
void check_attention(const AttentionShape& shape, int block_size, const std::vector<SeqSpec>& seqs,
                     uint64_t seed) {
  CpuBackend backend(2);
  TensorArena arena(backend);
  Rng rng(seed);
  const int64_t hq = shape.num_heads, hkv = shape.num_kv_heads, hd = shape.head_dim;
  const int64_t row = (hq + 2 * hkv) * hd;
  const auto num_seqs = static_cast<int64_t>(seqs.size());
  int64_t max_blocks = 0, total_blocks = 0, num_tokens = 0;
  for (const auto& s : seqs) {
    const int64_t b = (s.context_len + block_size - 1) / block_size;
    max_blocks = std::max(max_blocks, b);
    total_blocks += b;
    num_tokens += s.query_len;
  }
  total_blocks += 3;  // spare blocks that no sequence uses
  std::vector<int32_t> pool(static_cast<size_t>(total_blocks));
  std::iota(pool.begin(), pool.end(), 0);
  for (size_t i = pool.size() - 1; i > 0; --i) {
    std::swap(pool[i], pool[static_cast<size_t>(rng.uniform_int(0, static_cast<int64_t>(i)))]);
  }
  const int64_t cache_elems = total_blocks * hkv * block_size * hd;
  auto k_cache = random_floats(rng, cache_elems, 50, 60);  // garbage where nothing was written
  auto v_cache = random_floats(rng, cache_elems, 50, 60);
  std::vector<int32_t> tables(static_cast<size_t>(num_seqs * max_blocks), -1);
  std::vector<std::vector<float>> keys, values;  // per sequence (context, hkv, hd)
  std::vector<int32_t> query_start = {0}, context_lens;
  size_t next_block = 0;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const auto& spec = seqs[static_cast<size_t>(s)];
    keys.push_back(random_floats(rng, spec.context_len * hkv * hd, -2, 2));
    values.push_back(random_floats(rng, spec.context_len * hkv * hd));
    for (int64_t p = 0; p < spec.context_len; ++p) {
      if (p % block_size == 0)
        tables[static_cast<size_t>(s * max_blocks + p / block_size)] = pool[next_block++];
      const int64_t block = tables[static_cast<size_t>(s * max_blocks + p / block_size)];
      for (int64_t g = 0; g < hkv; ++g) {
        for (int64_t d = 0; d < hd; ++d) {
          const auto c =
              static_cast<size_t>(((block * hkv + g) * block_size + p % block_size) * hd + d);
          const auto src = static_cast<size_t>((p * hkv + g) * hd + d);
          k_cache[c] = keys.back()[src];
          v_cache[c] = values.back()[src];
        }
      }
    }
    query_start.push_back(query_start.back() + spec.query_len);
    context_lens.push_back(spec.context_len);
  }
  const auto qkv_v = random_floats(rng, num_tokens * row, -2, 2);
  KvCacheLayer kv{arena.f32({total_blocks, hkv, block_size, hd}, k_cache),
                  arena.f32({total_blocks, hkv, block_size, hd}, v_cache), block_size};
  AttentionMetadata meta;
  meta.num_seqs = static_cast<int>(num_seqs);
  meta.num_tokens = static_cast<int>(num_tokens);
  meta.query_start = arena.i32({num_seqs + 1}, query_start);
  meta.context_lens = arena.i32({num_seqs}, context_lens);
  meta.block_tables = arena.i32({num_seqs, max_blocks}, tables);
  Tensor out = arena.empty(DType::kF32, {num_tokens, hq * hd});
  backend.attention(arena.f32({num_tokens, row}, qkv_v), kv, meta, shape, out);
  const auto got = arena.to_host(out);

  for (int64_t s = 0; s < num_seqs; ++s) {
    const auto& spec = seqs[static_cast<size_t>(s)];
    const auto& ks = keys[static_cast<size_t>(s)];
    const auto& vs = values[static_cast<size_t>(s)];
    for (int64_t j = 0; j < spec.query_len; ++j) {
      const int64_t t = query_start[static_cast<size_t>(s)] + j;
      const int64_t pos = spec.context_len - spec.query_len + j;
      const int64_t first =
          shape.sliding_window > 0 ? std::max<int64_t>(0, pos - shape.sliding_window + 1) : 0;
      for (int64_t h = 0; h < hq; ++h) {
        const int64_t g = h / (hq / hkv);
        std::vector<double> sc;
        for (int64_t p = first; p <= pos; ++p) {
          double dot = 0;
          for (int64_t d = 0; d < hd; ++d) {
            dot += double{qkv_v[static_cast<size_t>(t * row + h * hd + d)]} *
                   ks[static_cast<size_t>((p * hkv + g) * hd + d)];
          }
          sc.push_back(dot * shape.scale);
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

TEST(CpuAttention, MultiHeadAndMultiQueryGroupings) {
  check_attention({3, 3, 8, 0.35f, 0}, 16, {{40, 40}, {3, 1}}, 2);
  check_attention({8, 1, 8, 0.35f, 0}, 2, {{11, 4}, {6, 6}}, 3);
}

TEST(CpuAttention, SlidingWindowLimitsKeys) {
  check_attention({4, 2, 8, 0.35f, 5}, 4, {{20, 20}, {13, 1}, {9, 3}, {4, 4}}, 4);
  check_attention({2, 1, 6, 0.4f, 1}, 3, {{7, 7}}, 5);  // window 1: each token sees itself only
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

}  // namespace
}  // namespace ib
