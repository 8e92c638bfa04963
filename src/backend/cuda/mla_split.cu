// Multi-head latent attention split across blocks (IB_MLA_SPLIT=1; mla.cu's fused kernel is a block
// per query token and head: 16 blocks at DeepSeek-V2-Lite's batch 1, each reading 256 KB of
// kv_b and the whole context). Three kernels, fp32 scratch in the attention workspace:
//   mla_q_latent_kernel   (token x head, 64 latent columns): q_lat = W_UK^T q_nope, with q_pe
//                         beside it: the query in the cache's layout, (T, H, R + P);
//   mla_split_kernel      (token x head, split): the online softmax over the split's share of
//                         the token's context (fixed split count, each split's keys found from
//                         the device's context length, so a captured graph stays right as the
//                         context grows): unnormalised o (T, H, S, R), max and sum (T, H, S, 2);
//   mla_out_kernel        (token x head, 32 output rows): the splits combined into o, then
//                         out = W_UV o.
// Tokens go in chunks that fit the workspace.
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/mla_device.cuh"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace mla {

constexpr int kQCols = 64;               // latent columns per block of mla_q_latent_kernel
constexpr int kOutRows = kWarps * 4;     // output rows per block of mla_out_kernel
constexpr int kQPartial = kThreads * 8;  // floats: its row groups' partial sums

// q (T, H (N + P)); kv_b (H (N + V), R); q_cat (chunk tokens, H, R + P) fp32.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    mla_q_latent_kernel(const T* __restrict__ q, const T* __restrict__ kv_b, MlaShape s, int t0,
                        float* __restrict__ q_cat) {
  __shared__ float q_nope_s[kMlaMaxNopeDim];
  __shared__ float partial[kQPartial];
  const int r = s.kv_lora_rank, p = s.qk_rope_head_dim, n = s.qk_nope_head_dim;
  const int local = static_cast<int>(blockIdx.x) / s.num_heads;
  const int head = static_cast<int>(blockIdx.x) % s.num_heads;
  const T* q_head = q + (int64_t{t0 + local} * s.num_heads + head) * (n + p);
  float* dst = q_cat + (int64_t{local} * s.num_heads + head) * (r + p);
  pdl_wait();
  pdl_trigger();
  for (int i = threadIdx.x; i < n; i += kThreads) q_nope_s[i] = to_f32(q_head[i]);
  if (blockIdx.y == 0) {
    for (int i = threadIdx.x; i < p; i += kThreads) dst[r + i] = to_f32(q_head[n + i]);
  }
  __syncthreads();
  // A thread per V columns and a group of rows; the groups' sums added in group order.
  constexpr int kColsV = kQCols / V, kGroups = kThreads / kColsV;
  const int cv = threadIdx.x % kColsV, g = threadIdx.x / kColsV;
  const int j0 = static_cast<int>(blockIdx.y) * kQCols + cv * V;
  const T* w_uk = kv_b + int64_t{head} * (n + s.v_head_dim) * r;
  float acc[V] = {};
  // with V > 1, R is a multiple of V: the vector is whole
  if (j0 < r) rows_dot<T, V>(w_uk, q_nope_s, g, n, kGroups, r, j0, acc);
#pragma unroll
  for (int u = 0; u < V; ++u) partial[g * kQCols + cv * V + u] = acc[u];
  __syncthreads();
  const int j = static_cast<int>(blockIdx.y) * kQCols + static_cast<int>(threadIdx.x);
  if (threadIdx.x < kQCols && j < r) {
    float sum = 0.0f;
    for (int gg = 0; gg < kGroups; ++gg) sum += partial[gg * kQCols + threadIdx.x];
    dst[j] = sum;
  }
}

// q_cat as above; cache (blocks, 1, block_size, R + P); o_part (chunk tokens, H, S, R) and ml
// (chunk tokens, H, S, 2) fp32. Dynamic shared memory: the query row (R + P floats).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    mla_split_kernel(const float* __restrict__ q_cat, const T* __restrict__ cache,
                     const int32_t* __restrict__ query_start,
                     const int32_t* __restrict__ context_lens,
                     const int32_t* __restrict__ block_tables, int max_blocks_per_seq, int num_seqs,
                     int block_size, MlaShape s, int t0, int splits, float* __restrict__ o_part,
                     float* __restrict__ ml) {
  extern __shared__ float q_s[];
  __shared__ float scores[kKeysPerRound];
  __shared__ int64_t entries[kKeysPerRound];  // the round's keys' cache offsets, -1: none
  const int r = s.kv_lora_rank, width = r + s.qk_rope_head_dim;
  const int local = static_cast<int>(blockIdx.x) / s.num_heads;
  const int head = static_cast<int>(blockIdx.x) % s.num_heads;
  const int split = static_cast<int>(blockIdx.y);
  const int64_t row = (int64_t{local} * s.num_heads + head) * splits + split;
  pdl_wait();
  pdl_trigger();
  const QueryPlace at = place_of(query_start, context_lens, num_seqs, t0 + local);
  const int keys = at.pos + 1;  // <= 0 on a padding row
  const int chunk = (std::max(keys, 0) + splits - 1) / splits;
  const int k0 = split * chunk, k1 = std::min(keys, k0 + chunk);
  if (k0 >= k1) {  // nothing to attend: the combine skips a split whose sum is 0
    if (threadIdx.x == 0) {
      ml[row * 2] = -INFINITY;
      ml[row * 2 + 1] = 0.0f;
    }
    return;
  }
  const float* q_row = q_cat + (int64_t{local} * s.num_heads + head) * width;
  for (int i = threadIdx.x; i < width; i += kThreads) q_s[i] = q_row[i];
  __syncthreads();
  SoftmaxState<V> st;
  attend_keys<T, V>(q_s, cache, block_tables + int64_t{at.seq} * max_blocks_per_seq, block_size, r,
                    width, s.scale, k0, k1, st, scores, entries);
  float* o_dst = o_part + row * r;
#pragma unroll
  for (int c = 0; c < kItems<V>; ++c) {
    const int j = (threadIdx.x + c * kThreads) * kPer<V>;
#pragma unroll
    for (int u = 0; u < kPer<V>; ++u) {
      if (j + u < r) o_dst[j + u] = st.o[c][u];
    }
  }
  if (threadIdx.x == 0) {
    ml[row * 2] = st.run_max;
    ml[row * 2 + 1] = st.run_sum;
  }
}

// o_part, ml as above; out (T, H V). Dynamic shared memory: o (R floats).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    mla_out_kernel(const float* __restrict__ o_part, const float* __restrict__ ml,
                   const T* __restrict__ kv_b, const int32_t* __restrict__ query_start,
                   const int32_t* __restrict__ context_lens, int num_seqs, MlaShape s, int t0,
                   int splits, T* __restrict__ out) {
  extern __shared__ float o_s[];
  const int r = s.kv_lora_rank, n = s.qk_nope_head_dim, v = s.v_head_dim;
  const int local = static_cast<int>(blockIdx.x) / s.num_heads;
  const int head = static_cast<int>(blockIdx.x) % s.num_heads;
  const int i_begin = static_cast<int>(blockIdx.y) * kOutRows;
  const int i_end = std::min(v, i_begin + kOutRows);
  T* dst = out + (int64_t{t0 + local} * s.num_heads + head) * v;
  pdl_wait();
  pdl_trigger();
  const QueryPlace at = place_of(query_start, context_lens, num_seqs, t0 + local);
  if (at.pos < 0) {  // a decode bucket's padding row (no context): zeros, not 0 / 0
    for (int i = i_begin + static_cast<int>(threadIdx.x); i < i_end; i += kThreads)
      dst[i] = from_f32<T>(0.0f);
    return;
  }
  const int64_t row0 = (int64_t{local} * s.num_heads + head) * splits;
  // Each split's weight exp(m_s - m) / sum_s' l_s' exp(m_s' - m) (0 for an empty split), once
  // per block: the first warp reads every split's max and sum at once (a lane per split) and
  // reduces them (one thread's loop over the splits was a chain of dependent loads).
  static_assert(kMlaMaxSplits <= 32, "a lane per split");
  __shared__ float weight[kMlaMaxSplits];
  if (threadIdx.x < 32) {
    const int sp = static_cast<int>(threadIdx.x);
    const float m_s = sp < splits ? ml[(row0 + sp) * 2] : -INFINITY;
    const float l_s = sp < splits ? ml[(row0 + sp) * 2 + 1] : 0.0f;
    const float m = warp_max(l_s > 0.0f ? m_s : -INFINITY);
    const float w = l_s > 0.0f ? expf(m_s - m) : 0.0f;
    const float total = warp_sum(l_s * w);
    if (sp < kMlaMaxSplits) weight[sp] = sp < splits ? w / total : 0.0f;
  }
  __syncthreads();
  for (int j = threadIdx.x; j < r; j += kThreads) {
    float acc = 0.0f;
#pragma unroll
    for (int sp = 0; sp < kMlaMaxSplits; ++sp) {  // unrolled: the splits' loads in flight together
      if (sp < splits && weight[sp] > 0.0f) acc += weight[sp] * o_part[(row0 + sp) * r + j];
    }
    o_s[j] = acc;
  }
  __syncthreads();
  const T* w_uv = kv_b + (int64_t{head} * (n + v) + n) * r;
  project_out<T, V>(w_uv, o_s, r, i_begin, i_end, dst);
}

}  // namespace mla

MlaSplitPlan mla_split_plan(int64_t tokens, const MlaShape& shape, size_t workspace_bytes,
                            int num_sms) {
  MlaSplitPlan plan;
  const int64_t heads = shape.num_heads, r = shape.kv_lora_rank;
  const int64_t width = r + shape.qk_rope_head_dim;
  const int64_t rows = std::max<int64_t>(1, tokens * heads);
  // Two blocks per SM across the token x head rows, at most kMlaMaxSplits.
  plan.splits = static_cast<int>(
      std::clamp<int64_t>((2 * int64_t{num_sms} + rows - 1) / rows, 1, kMlaMaxSplits));
  const auto per_token = [&](int splits) {
    return heads * (width + splits * (r + 2)) * static_cast<int64_t>(sizeof(float));
  };
  while (plan.splits > 1 && per_token(plan.splits) > static_cast<int64_t>(workspace_bytes))
    --plan.splits;
  plan.chunk_tokens =
      std::min(tokens, static_cast<int64_t>(workspace_bytes) / per_token(plan.splits));
  return plan;
}

void launch_mla_split_attention(const Tensor& q, const Tensor& kv_b, const KvCacheLayer& kv,
                                const AttentionMetadata& meta, const MlaShape& shape, Tensor out,
                                void* workspace, size_t workspace_bytes, int num_sms,
                                cudaStream_t stream, bool pdl) {
  const int64_t t = q.rows();
  if (t == 0) return;
  const MlaSplitPlan plan = mla_split_plan(t, shape, workspace_bytes, num_sms);
  IB_ASSERT(plan.chunk_tokens >= 1, "mla_attention: one token's scratch exceeds the workspace");
  const int h = shape.num_heads, r = shape.kv_lora_rank, width = r + shape.qk_rope_head_dim;
  auto* q_cat = static_cast<float*>(workspace);
  float* o_part = q_cat + plan.chunk_tokens * h * width;
  float* ml = o_part + plan.chunk_tokens * h * plan.splits * r;
  const auto units = [](int64_t a, int64_t b) { return static_cast<unsigned>((a + b - 1) / b); };
  IB_DISPATCH_FLOAT(q.dtype, T, {
    constexpr int kV = kVec16<T>;
    const bool vec = shape.kv_lora_rank % kV == 0 && shape.qk_rope_head_dim % kV == 0;
    auto* latent = vec ? mla::mla_q_latent_kernel<T, kV> : mla::mla_q_latent_kernel<T, 1>;
    auto* split = vec ? mla::mla_split_kernel<T, kV> : mla::mla_split_kernel<T, 1>;
    auto* project = vec ? mla::mla_out_kernel<T, kV> : mla::mla_out_kernel<T, 1>;
    for (int64_t t0 = 0; t0 < t; t0 += plan.chunk_tokens) {
      const auto rows = static_cast<unsigned>(std::min(plan.chunk_tokens, t - t0) * h);
      const int first = static_cast<int>(t0);
      launch_kernel("mla_q_latent", pdl, latent, dim3(rows, units(r, mla::kQCols)),
                    dim3(mla::kThreads), 0, stream, q.as<const T>(), kv_b.as<const T>(), shape,
                    first, q_cat);
      launch_kernel("mla_split", pdl, split, dim3(rows, static_cast<unsigned>(plan.splits)),
                    dim3(mla::kThreads), static_cast<size_t>(width) * sizeof(float), stream,
                    static_cast<const float*>(q_cat), kv.k.as<const T>(),
                    meta.query_start.as<const int32_t>(), meta.context_lens.as<const int32_t>(),
                    meta.block_tables.as<const int32_t>(),
                    static_cast<int>(meta.block_tables.dim(1)), meta.num_seqs, kv.block_size, shape,
                    first, plan.splits, o_part, ml);
      launch_kernel("mla_out", pdl, project, dim3(rows, units(shape.v_head_dim, mla::kOutRows)),
                    dim3(mla::kThreads), static_cast<size_t>(r) * sizeof(float), stream,
                    static_cast<const float*>(o_part), static_cast<const float*>(ml),
                    kv_b.as<const T>(), meta.query_start.as<const int32_t>(),
                    meta.context_lens.as<const int32_t>(), meta.num_seqs, shape, first, plan.splits,
                    out.as<T>());
    }
  });
}

}  // namespace ib::cuda
