// The operand checks of MlaOps (ops.h) that every backend makes the same way, before its own
// dtype checks: shapes of q, the latent, the cache, kv_b and the metadata.
#pragma once

#include "backend/ops.h"

namespace ib {

inline void check_mla_rope_and_cache_shapes(const Tensor& q, const Tensor& latent,
                                            const Tensor& kv_norm, const Tensor& positions,
                                            const Tensor& slot_mapping, const Tensor& inv_freq,
                                            const KvCacheLayer& kv, const MlaShape& shape) {
  const int64_t t = q.rows(), r = shape.kv_lora_rank, p = shape.qk_rope_head_dim;
  IB_ASSERT(p % 2 == 0 && q.row_size() == int64_t{shape.num_heads} * (shape.qk_nope_head_dim + p) &&
                latent.rows() == t && latent.row_size() == r + p && kv_norm.numel() == r &&
                inv_freq.numel() == p / 2 && positions.numel() >= t && slot_mapping.numel() >= t &&
                kv.k.rank == 4 && kv.k.dim(1) == 1 && kv.k.dim(3) == r + p,
            "mla_rope_and_cache: q (T, H (N + P)), latent (T, R + P), kv_norm (R), inv_freq "
            "(P / 2), cache (blocks, 1, block_size, R + P)");
}

inline void check_mla_attention_shapes(const Tensor& q, const WeightRef& kv_b,
                                       const KvCacheLayer& kv, const AttentionMetadata& meta,
                                       const MlaShape& shape, const Tensor& out) {
  const int64_t h = shape.num_heads, r = shape.kv_lora_rank;
  IB_ASSERT(q.row_size() == h * (shape.qk_nope_head_dim + shape.qk_rope_head_dim) &&
                out.rows() == q.rows() && out.row_size() == h * shape.v_head_dim &&
                kv_b.rows() == h * (shape.qk_nope_head_dim + shape.v_head_dim) &&
                kv_b.cols() == r && kv.k.rank == 4 && kv.k.dim(3) == r + shape.qk_rope_head_dim,
            "mla_attention: q (T, H (N + P)), out (T, H V), kv_b (H (N + V), R), cache entries "
            "of R + P");
  IB_ASSERT(meta.query_start.dtype == DType::kI32 && meta.context_lens.dtype == DType::kI32 &&
                meta.block_tables.dtype == DType::kI32 && meta.block_tables.rank == 2,
            "mla_attention: metadata must be int32; block_tables (num_seqs, max_blocks)");
}

}  // namespace ib
