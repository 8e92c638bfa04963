// Host-side launchers of mla.cu, multi-head latent attention (backend/ops.h, MlaOps). Like
// kernels.h's: they enqueue on `stream`, never synchronize and never allocate (graph-safe).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>

#include "backend/backend.h"

namespace ib::cuda {

inline constexpr int kMlaMaxLatent = 512;    // R = kv_lora_rank (DeepSeek-V2: 512)
inline constexpr int kMlaMaxRopeDim = 128;   // P = qk_rope_head_dim (DeepSeek-V2: 64)
inline constexpr int kMlaMaxNopeDim = 1024;  // N = qk_nope_head_dim (DeepSeek-V2: 128)
inline constexpr int kMlaMaxSplits = 16;     // context splits per (token, head), IB_MLA_SPLIT

// Whether the kernels take the shape (R <= 512, P even and <= 128, N <= 1024).
bool mla_shape_supported(const MlaShape& shape);
// The attention kernel's dynamic shared memory: the query in the cache's layout (R + P), q_nope
// (N) and the row groups' partial sums of q_lat, later o (mla.cu), fp32.
size_t mla_attention_smem_bytes(const MlaShape& shape);
// MlaOps::mla_rope_and_cache on x's dtype: q, latent and kv_norm in it, the cache too.
void launch_mla_rope_and_cache(Tensor q, Tensor latent, const Tensor& kv_norm, float eps,
                               const Tensor& positions, const Tensor& slot_mapping,
                               const Tensor& inv_freq, const KvCacheLayer& kv,
                               const MlaShape& shape, cudaStream_t stream, bool pdl);
// MlaOps::mla_attention; kv_b (H (N + V), R) dense in x's dtype.
void launch_mla_attention(const Tensor& q, const Tensor& kv_b, const KvCacheLayer& kv,
                          const AttentionMetadata& meta, const MlaShape& shape, Tensor out,
                          cudaStream_t stream, bool pdl);

// IB_MLA_SPLIT's plan (mla_split.cu): context splits per (token, head), enough for two blocks per
// SM, at most kMlaMaxSplits, fewer if one token's scratch would not fit the workspace; tokens per
// launch chunk (0: not even one token fits).
struct MlaSplitPlan {
  int splits = 1;
  int64_t chunk_tokens = 0;
};
MlaSplitPlan mla_split_plan(int64_t tokens, const MlaShape& shape, size_t workspace_bytes,
                            int num_sms);
// MlaOps::mla_attention as three kernels split across blocks (mla_split.cu), the scratch in
// `workspace` (free between ops).
void launch_mla_split_attention(const Tensor& q, const Tensor& kv_b, const KvCacheLayer& kv,
                                const AttentionMetadata& meta, const MlaShape& shape, Tensor out,
                                void* workspace, size_t workspace_bytes, int num_sms,
                                cudaStream_t stream, bool pdl);

}  // namespace ib::cuda
