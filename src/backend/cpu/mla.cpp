// The CPU backend's multi-head latent attention (MlaOps, DeepSeek-V2): the latent's norm, the
// interleaved rotary embedding and the cache write; attention over the cached latents with the
// absorbed up-projections (q into latent space through W_UK, the output out of it through W_UV).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/detail/dot.h"
#include "backend/cpu/detail/kernels.h"
#include "backend/mla_checks.h"

namespace ib {
namespace cpu {
namespace {

// Rotates P values in DeepSeek's interleaved layout: pair i is the complex x[2i] + i x[2i+1],
// multiplied by (cos_v[i] + i sin_v[i]) (rope_scale already folded into both).
void rotate_interleaved(float* x, const float* cos_v, const float* sin_v, int64_t pairs) {
  for (int64_t i = 0; i < pairs; ++i) {
    const float a = x[2 * i];
    const float b = x[2 * i + 1];
    x[2 * i] = a * cos_v[i] - b * sin_v[i];
    x[2 * i + 1] = a * sin_v[i] + b * cos_v[i];
  }
}

// Element offset of a token's entry in a (num_blocks, 1, block_size, width) cache.
int64_t entry_offset(int64_t block, int64_t offset, int64_t block_size, int64_t width) {
  return (block * block_size + offset) * width;
}

}  // namespace

void mla_rope_and_cache_f32(ThreadPool& pool, float* q, float* latent, const float* kv_norm,
                            float eps, const int32_t* positions, const int32_t* slot_mapping,
                            const float* inv_freq, int64_t num_tokens, const KvCacheLayer& kv,
                            const MlaShape& shape) {
  const int64_t r = shape.kv_lora_rank, n = shape.qk_nope_head_dim, p = shape.qk_rope_head_dim;
  const int64_t h = shape.num_heads;
  const int64_t width = r + p, q_row = h * (n + p), pairs = p / 2;
  const int64_t num_blocks = kv.k.dim(0);
  float* cache = kv.k.as<float>();
  pool.parallel_for(num_tokens, 4, [&](int64_t begin, int64_t end) {
    std::vector<float> cos_v(static_cast<size_t>(pairs)), sin_v(static_cast<size_t>(pairs));
    for (int64_t t = begin; t < end; ++t) {
      const auto pos = static_cast<float>(positions[t]);
      for (int64_t i = 0; i < pairs; ++i) {
        const float angle = pos * inv_freq[i];
        cos_v[static_cast<size_t>(i)] = std::cos(angle) * shape.rope_scale;
        sin_v[static_cast<size_t>(i)] = std::sin(angle) * shape.rope_scale;
      }
      float* entry = latent + t * width;
      rms_norm_row(entry, kv_norm, eps, r, entry);
      rotate_interleaved(entry + r, cos_v.data(), sin_v.data(), pairs);
      for (int64_t head = 0; head < h; ++head) {
        rotate_interleaved(q + t * q_row + head * (n + p) + n, cos_v.data(), sin_v.data(), pairs);
      }
      const int32_t slot = slot_mapping[t];
      if (slot < 0) continue;
      const int64_t block = slot / kv.block_size;
      IB_ASSERT(block < num_blocks, "mla_rope_and_cache: slot beyond the KV cache");
      std::memcpy(cache + entry_offset(block, slot % kv.block_size, kv.block_size, width), entry,
                  static_cast<size_t>(width) * sizeof(float));
    }
  });
}

void mla_attention_f32(ThreadPool& pool, const float* q, const float* kv_b, const KvCacheLayer& kv,
                       const AttentionHostMeta& meta, const MlaShape& shape, float* out) {
  const int64_t r = shape.kv_lora_rank, n = shape.qk_nope_head_dim, p = shape.qk_rope_head_dim;
  const int64_t v = shape.v_head_dim, h = shape.num_heads;
  const int64_t width = r + p, q_row = h * (n + p), head_rows = n + v;
  const int64_t num_tokens = meta.query_start[meta.num_seqs];
  const int64_t num_blocks = kv.k.dim(0);
  const float* cache = kv.k.as<const float>();
  std::vector<int32_t> seq_of_token(static_cast<size_t>(num_tokens));
  int64_t max_context = 0;
  for (int s = 0; s < meta.num_seqs; ++s) {
    IB_ASSERT(meta.query_start[s + 1] - meta.query_start[s] <= meta.context_lens[s],
              "mla_attention: more query tokens than context");
    for (int32_t t = meta.query_start[s]; t < meta.query_start[s + 1]; ++t) {
      seq_of_token[static_cast<size_t>(t)] = s;
    }
    max_context = std::max<int64_t>(max_context, meta.context_lens[s]);
  }
  // One work item per (query token, head).
  pool.parallel_for(num_tokens * h, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> q_lat(static_cast<size_t>(r)), o(static_cast<size_t>(r));
    std::vector<float> scores(static_cast<size_t>(max_context));
    std::vector<const float*> entries(static_cast<size_t>(max_context));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / h, head = item % h;
      const int32_t s = seq_of_token[static_cast<size_t>(t)];
      const int64_t q_len = meta.query_start[s + 1] - meta.query_start[s];
      const int64_t pos = meta.context_lens[s] - q_len + (t - meta.query_start[s]);
      const int32_t* table = meta.block_tables + s * meta.max_blocks_per_seq;
      const float* q_nope = q + t * q_row + head * (n + p);
      const float* q_pe = q_nope + n;
      const float* w_uk = kv_b + head * head_rows * r;  // (N, R)
      const float* w_uv = w_uk + n * r;                 // (V, R)
      // q_lat = W_UK^T q_nope.
      std::fill(q_lat.begin(), q_lat.end(), 0.0f);
      for (int64_t i = 0; i < n; ++i) {
        const float qi = q_nope[i];
        const float* row = w_uk + i * r;
        for (int64_t j = 0; j < r; ++j) q_lat[static_cast<size_t>(j)] += qi * row[j];
      }
      float mx = -INFINITY;
      for (int64_t key = 0; key <= pos; ++key) {
        const int32_t block = table[key / kv.block_size];
        IB_ASSERT(block >= 0 && block < num_blocks, "mla_attention: bad block table entry");
        const float* e = cache + entry_offset(block, key % kv.block_size, kv.block_size, width);
        entries[static_cast<size_t>(key)] = e;
        const float score = (dot_f32(q_lat.data(), e, r) + dot_f32(q_pe, e + r, p)) * shape.scale;
        scores[static_cast<size_t>(key)] = score;
        mx = std::max(mx, score);
      }
      float sum = 0.0f;
      for (int64_t key = 0; key <= pos; ++key) {
        float& sc = scores[static_cast<size_t>(key)];
        sc = std::exp(sc - mx);
        sum += sc;
      }
      std::fill(o.begin(), o.end(), 0.0f);
      for (int64_t key = 0; key <= pos; ++key) {
        const float w = scores[static_cast<size_t>(key)] / sum;
        const float* e = entries[static_cast<size_t>(key)];
        for (int64_t j = 0; j < r; ++j) o[static_cast<size_t>(j)] += w * e[j];
      }
      float* dst = out + t * h * v + head * v;
      for (int64_t i = 0; i < v; ++i) dst[i] = dot_f32(w_uv + i * r, o.data(), r);
    }
  });
}

}  // namespace cpu

void CpuBackend::mla_rope_and_cache(Tensor q, Tensor latent, const Tensor& kv_norm, float eps,
                                    const Tensor& positions, const Tensor& slot_mapping,
                                    const Tensor& inv_freq, const KvCacheLayer& kv,
                                    const MlaShape& shape) {
  const int64_t t = q.rows();
  IB_ASSERT(q.dtype == DType::kF32 && latent.dtype == DType::kF32 && kv.k.dtype == DType::kF32 &&
                kv_norm.dtype == DType::kF32,
            "mla_rope_and_cache: fp32 tensors and cache on the CPU");
  check_mla_rope_and_cache_shapes(q, latent, kv_norm, positions, slot_mapping, inv_freq, kv, shape);
  cpu::mla_rope_and_cache_f32(pool_, q.as<float>(), latent.as<float>(), kv_norm.as<const float>(),
                              eps, positions.as<const int32_t>(), slot_mapping.as<const int32_t>(),
                              inv_freq.as<const float>(), t, kv, shape);
}

void CpuBackend::mla_attention(const Tensor& q, const WeightRef& kv_b, const KvCacheLayer& kv,
                               const AttentionMetadata& meta, const MlaShape& shape, Tensor out) {
  IB_ASSERT(q.dtype == DType::kF32 && out.dtype == DType::kF32 && kv.k.dtype == DType::kF32 &&
                kv_b.format == WeightFormat::kDense && kv_b.data.dtype == DType::kF32,
            "mla_attention: fp32 q, out, cache and a dense fp32 kv_b on the CPU");
  check_mla_attention_shapes(q, kv_b, kv, meta, shape, out);
  const auto* query_start = meta.query_start.as<const int32_t>();
  IB_ASSERT(query_start[0] == 0 && query_start[meta.num_seqs] == q.rows(),
            "mla_attention: query_start must cover the T tokens of q");
  cpu::AttentionHostMeta host{meta.num_seqs, query_start, meta.context_lens.as<const int32_t>(),
                              meta.block_tables.as<const int32_t>(), meta.block_tables.dim(1)};
  cpu::mla_attention_f32(pool_, q.as<const float>(), kv_b.data.as<const float>(), kv, host, shape,
                         out.as<float>());
}

}  // namespace ib
