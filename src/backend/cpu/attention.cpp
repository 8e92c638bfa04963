// Rotary embedding with the KV-cache write, and paged attention, in fp32 over an fp32 or an
// fp8_e4m3 cache (ops.h, KvCacheLayer).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/detail/dot.h"
#include "backend/cpu/detail/kernels.h"

namespace ib::cpu {
namespace {

// Element offset of (block, kv head, offset in block) in a (num_blocks, hkv, block_size, head_dim)
// cache.
int64_t cache_offset(int64_t block, int64_t head, int64_t offset, const KvCacheLayer& kv,
                     int64_t num_kv_heads, int64_t head_dim) {
  return ((block * num_kv_heads + head) * kv.block_size + offset) * head_dim;
}

// One cache half (K or V) as the kernels read and write it: fp32, or fp8_e4m3 with its scale
// (ops.h, KvCacheLayer). An fp8 row is decoded through a 256-entry table of stored * scale.
class CacheRows {
 public:
  CacheRows(const Tensor& cache, float scale) : cache_(cache), scale_(scale) {
    IB_ASSERT(cache.dtype == DType::kF32 || cache.dtype == DType::kF8E4M3,
              "KV cache must be fp32 or fp8_e4m3 on the CPU");
    if (fp8()) {
      for (int b = 0; b < 256; ++b) {
        decoded_[static_cast<size_t>(b)] = f8e4m3_bits_to_f32(static_cast<uint8_t>(b)) * scale;
      }
    }
  }
  bool fp8() const { return cache_.dtype == DType::kF8E4M3; }
  // Writes n values at element offset: e4m3(x / scale) for fp8.
  void store(int64_t offset, const float* x, int64_t n) const {
    if (!fp8()) {
      std::memcpy(cache_.as<float>() + offset, x, static_cast<size_t>(n) * sizeof(float));
      return;
    }
    uint8_t* dst = cache_.as<uint8_t>() + offset;
    for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f8e4m3_bits(x[i] / scale_);
  }
  // The n values at element offset in fp32: the cache itself, or decoded into scratch (n).
  const float* load(int64_t offset, int64_t n, float* scratch) const {
    if (!fp8()) return cache_.as<const float>() + offset;
    const uint8_t* src = cache_.as<const uint8_t>() + offset;
    for (int64_t i = 0; i < n; ++i) scratch[i] = decoded_[src[i]];
    return scratch;
  }

 private:
  Tensor cache_;
  float scale_;
  std::array<float, 256> decoded_{};  // stored byte -> float(stored) * scale
};

// Keys [begin, end) of the cache.
struct KeyRange {
  int64_t begin, end;
};

// The keys a query at pos sees, ascending, into out: the causal range cut to the sliding
// window, or the block-sparse pattern's strided blocks and local band (backend/block_sparse.h).
void visible_keys(const AttentionShape& shape, int64_t pos, std::vector<KeyRange>& out) {
  out.clear();
  const BlockSparse& b = shape.block_sparse;
  if (!b.enabled()) {
    const int64_t first =
        shape.sliding_window > 0 ? std::max<int64_t>(0, pos - shape.sliding_window + 1) : 0;
    out.push_back({first, pos + 1});
    return;
  }
  const int64_t local = block_sparse_local_begin(b, static_cast<int>(pos));
  for (int64_t block = b.vert_stride - 1; block < local; block += b.vert_stride) {
    out.push_back({block * b.block_size, (block + 1) * b.block_size});
  }
  out.push_back({local * b.block_size, pos + 1});
}

}  // namespace

void rope_and_cache_f32(ThreadPool& pool, float* qkv, const int32_t* positions,
                        const int32_t* slot_mapping, const float* inv_freq, int64_t num_tokens,
                        const KvCacheLayer& kv, const AttentionShape& shape) {
  const int64_t hd = shape.head_dim;
  const int64_t half = hd / 2;
  const int64_t hq = shape.num_heads;
  const int64_t hkv = shape.num_kv_heads;
  const int64_t row = (hq + 2 * hkv) * hd;
  const int64_t num_blocks = kv.k.dim(0);
  const CacheRows k_cache(kv.k, kv.k_scale);
  const CacheRows v_cache(kv.v, kv.v_scale);
  pool.parallel_for(num_tokens, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> cos_v(static_cast<size_t>(half));  // (head_dim / 2)
    std::vector<float> sin_v(static_cast<size_t>(half));  // (head_dim / 2)
    for (int64_t t = begin; t < end; ++t) {
      float* x = qkv + t * row;  // (hq + 2 hkv, head_dim): q heads, k heads, v heads
      const auto pos = static_cast<float>(positions[t]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq[i];
        cos_v[static_cast<size_t>(i)] = std::cos(angle);
        sin_v[static_cast<size_t>(i)] = std::sin(angle);
      }
      // Rotate-half: (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin) on q and k heads.
      for (int64_t h = 0; h < hq + hkv; ++h) {
        float* head = x + h * hd;
        for (int64_t i = 0; i < half; ++i) {
          const float x1 = head[i];
          const float x2 = head[i + half];
          const float c = cos_v[static_cast<size_t>(i)];
          const float s = sin_v[static_cast<size_t>(i)];
          head[i] = x1 * c - x2 * s;
          head[i + half] = x2 * c + x1 * s;
        }
      }
      const int32_t slot = slot_mapping[t];
      if (slot < 0) continue;
      const int64_t block = slot / kv.block_size;
      const int64_t offset = slot % kv.block_size;
      IB_ASSERT(block < num_blocks, "rope_and_cache: slot beyond the KV cache");
      for (int64_t h = 0; h < hkv; ++h) {
        const int64_t dst = cache_offset(block, h, offset, kv, hkv, hd);
        k_cache.store(dst, x + (hq + h) * hd, hd);
        v_cache.store(dst, x + (hq + hkv + h) * hd, hd);
      }
    }
  });
}

void paged_attention_f32(ThreadPool& pool, const float* qkv, const KvCacheLayer& kv,
                         const AttentionHostMeta& meta, const AttentionShape& shape, float* out) {
  const int64_t hd = shape.head_dim;
  const int64_t hq = shape.num_heads;
  const int64_t hkv = shape.num_kv_heads;
  const int64_t group = hq / hkv;
  const int64_t row = (hq + 2 * hkv) * hd;
  const int64_t num_tokens = meta.query_start[meta.num_seqs];
  const int64_t num_blocks = kv.k.dim(0);
  // Which sequence each packed query token belongs to, and the longest context.
  std::vector<int32_t> seq_of_token(static_cast<size_t>(num_tokens));  // (num_tokens)
  int64_t max_context = 0;
  for (int s = 0; s < meta.num_seqs; ++s) {
    IB_ASSERT(meta.query_start[s + 1] - meta.query_start[s] <= meta.context_lens[s],
              "attention: more query tokens than context");
    for (int32_t t = meta.query_start[s]; t < meta.query_start[s + 1]; ++t) {
      seq_of_token[static_cast<size_t>(t)] = s;
    }
    max_context = std::max<int64_t>(max_context, meta.context_lens[s]);
  }
  const CacheRows k_cache(kv.k, kv.k_scale);
  const CacheRows v_cache(kv.v, kv.v_scale);

  // One work item per (query token, kv head): the group of query heads sharing that kv head.
  pool.parallel_for(num_tokens * hkv, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> scores(static_cast<size_t>(group * max_context));  // (group, context)
    std::vector<float> acc(static_cast<size_t>(hd));                      // (head_dim)
    std::vector<float> decoded(static_cast<size_t>(hd));  // (head_dim) an fp8 K or V row, read
    std::vector<KeyRange> ranges;                         // the visible keys of one query
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / hkv;
      const int64_t g = item % hkv;
      const int32_t s = seq_of_token[static_cast<size_t>(t)];
      const int64_t q_len = meta.query_start[s + 1] - meta.query_start[s];
      const int64_t pos = meta.context_lens[s] - q_len + (t - meta.query_start[s]);
      visible_keys(shape, pos, ranges);
      int64_t n_keys = 0;
      for (const KeyRange& r : ranges) n_keys += r.end - r.begin;
      const int32_t* table = meta.block_tables + s * meta.max_blocks_per_seq;
      // Calls fn(j, offset, run) for each run of visible keys j .. j + run - 1 (counted over the
      // visible keys only) that lie contiguously in one cache block; offset is the first key's
      // element offset in the cache.
      auto for_each_run = [&](auto&& fn) {
        int64_t j = 0;
        for (const KeyRange& r : ranges) {
          for (int64_t key = r.begin; key < r.end;) {
            const int32_t block = table[key / kv.block_size];
            IB_ASSERT(block >= 0 && block < num_blocks, "attention: bad block table entry");
            const int64_t in_block = key % kv.block_size;
            const int64_t run = std::min<int64_t>(kv.block_size - in_block, r.end - key);
            fn(j, cache_offset(block, g, in_block, kv, hkv, hd), run);
            key += run;
            j += run;
          }
        }
      };
      // scores[h][j] = dot(q_h, k_j) * scale for the group's query heads.
      for_each_run([&](int64_t j0, int64_t offset, int64_t run) {
        for (int64_t r = 0; r < run; ++r) {
          const float* k = k_cache.load(offset + r * hd, hd, decoded.data());
          for (int64_t h = 0; h < group; ++h) {
            const float* q = qkv + t * row + (g * group + h) * hd;
            float score = dot_f32(q, k, hd) * shape.scale;
            if (shape.logit_softcap > 0) {
              score = shape.logit_softcap * std::tanh(score / shape.logit_softcap);
            }
            scores[static_cast<size_t>(h * max_context + j0 + r)] = score;
          }
        }
      });
      for (int64_t h = 0; h < group; ++h) {
        float* sc = scores.data() + h * max_context;  // (n_keys)
        float mx = sc[0];
        for (int64_t j = 1; j < n_keys; ++j) mx = std::max(mx, sc[j]);
        float sum = 0.0f;
        for (int64_t j = 0; j < n_keys; ++j) {
          sc[j] = std::exp(sc[j] - mx);
          sum += sc[j];
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        float* a = acc.data();
        for_each_run([&](int64_t j0, int64_t offset, int64_t run) {
          for (int64_t r = 0; r < run; ++r) {
            const float p = sc[j0 + r] / sum;
            const float* v = v_cache.load(offset + r * hd, hd, decoded.data());
            for (int64_t d = 0; d < hd; ++d) a[d] += p * v[d];
          }
        });
        std::copy(acc.begin(), acc.end(), out + t * hq * hd + (g * group + h) * hd);
      }
    }
  });
}

}  // namespace ib::cpu
