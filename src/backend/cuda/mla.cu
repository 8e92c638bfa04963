// Multi-head latent attention on CUDA (backend/ops.h MlaOps, DeepSeek-V2), as the CPU backend
// computes it (cpu/mla.cpp, the oracle), in fp32 with x's dtype in memory.
//
// mla_rope_and_cache_kernel: a block per token normalises the latent c, rotates k_pe and every
// head's q_pe (DeepSeek's interleaved pairs, rope_scale folded into cos and sin) and writes
// [c | k_pe] to the cache. mla_attention_kernel: a block per (query token, head). The block turns
// q_nope into the latent space (q_lat = W_UK^T q_nope: 16-byte loads of V columns, row groups
// summed in shared memory), then walks the token's causal context 32 keys a round (each warp
// scores four keys with q_lat . c + q_pe . k_pe, their 16-byte loads in flight together; an
// online softmax rescales the running sum and each thread's pair of latent columns of o), and
// finally out = W_UV o, a warp per four output rows. Each key's latent is read by its scoring
// warp and again (from L1) by every thread for o, and each head's block reads the whole context.
// The round loop and the output projection are shared with mla_split.cu (IB_MLA_SPLIT: the same
// work split across more blocks) through detail/mla_device.cuh.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/mla_device.cuh"
#include "backend/cuda/detail/mla_kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace mla {

// x rotated in DeepSeek's interleaved layout: pair i = x[2i] + i x[2i+1] times (cos + i sin) of
// angle pos * inv_freq[i], scaled (fp32; stored in T).
template <typename T>
__device__ __forceinline__ void rotate_pair(T* x, int i, float pos, const float* inv_freq,
                                            float scale) {
  float sn, cs;
  sincosf(pos * inv_freq[i], &sn, &cs);
  cs *= scale;
  sn *= scale;
  const float a = to_f32(x[2 * i]), b = to_f32(x[2 * i + 1]);
  x[2 * i] = from_f32<T>(a * cs - b * sn);
  x[2 * i + 1] = from_f32<T>(a * sn + b * cs);
}

// q (T, H (N + P)), latent (T, R + P), kv_norm (R), cache (blocks, 1, block_size, R + P).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    mla_rope_and_cache_kernel(T* __restrict__ q, T* __restrict__ latent,
                              const T* __restrict__ kv_norm, float eps,
                              const int32_t* __restrict__ positions,
                              const int32_t* __restrict__ slot_mapping,
                              const float* __restrict__ inv_freq, T* __restrict__ cache,
                              int block_size, MlaShape s) {
  __shared__ float scratch[32];
  pdl_wait();
  pdl_trigger();
  const int64_t t = blockIdx.x;
  const int r = s.kv_lora_rank, p = s.qk_rope_head_dim, n = s.qk_nope_head_dim;
  const int width = r + p;
  T* entry = latent + t * width;
  float sum_sq = 0.0f;
  for (int j = threadIdx.x; j < r; j += kThreads) {
    const float v = to_f32(entry[j]);
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, scratch) / static_cast<float>(r) + eps);
  for (int j = threadIdx.x; j < r; j += kThreads)
    entry[j] = from_f32<T>(to_f32(entry[j]) * inv_rms * to_f32(kv_norm[j]));
  const auto pos = static_cast<float>(positions[t]);
  const int pairs = p / 2;
  for (int i = threadIdx.x; i < pairs; i += kThreads)
    rotate_pair(entry + r, i, pos, inv_freq, s.rope_scale);
  T* q_row = q + t * int64_t{s.num_heads} * (n + p);
  for (int e = threadIdx.x; e < s.num_heads * pairs; e += kThreads)
    rotate_pair(q_row + (e / pairs) * (n + p) + n, e % pairs, pos, inv_freq, s.rope_scale);
  __syncthreads();  // the block's writes of the entry before its copy
  const int32_t slot = slot_mapping[t];
  if (slot < 0) return;
  T* dst = cache + (int64_t{slot / block_size} * block_size + slot % block_size) * width;
  for (int j = threadIdx.x; j < width; j += kThreads) dst[j] = entry[j];
}

// The attention kernel's shared memory, in floats: [q_lat (R) | q_pe (P)] (the query in the
// cache's layout), q_nope (N), then kPartialFloats of per-row-group partial sums of q_lat that
// later hold o (R).
constexpr int kPartialFloats = kThreads * 8;

// q_lat = W_UK^T q_nope (W_UK (N, R)): a thread per V columns and a group of rows (R / V column
// vectors, kThreads / (R / V) row groups when they fit), each row group's sums in `partial`,
// added in group order.
template <typename T, int V>
__device__ __forceinline__ void latent_query(const T* w_uk, const float* q_nope, int n, int r,
                                             float* partial, float* q_lat) {
  const int cols = r / V;
  const int groups = cols >= kThreads ? 1 : kThreads / cols;
  for (int item = threadIdx.x; item < cols * groups; item += kThreads) {
    const int cv = item % cols, g = item / cols;
    float acc[V] = {};
    rows_dot<T, V>(w_uk, q_nope, g, n, groups, r, cv * V, acc);
#pragma unroll
    for (int u = 0; u < V; ++u) partial[g * r + cv * V + u] = acc[u];
  }
  __syncthreads();
  for (int j = threadIdx.x; j < r; j += kThreads) {
    float sum = 0.0f;
    for (int g = 0; g < groups; ++g) sum += partial[g * r + j];
    q_lat[j] = sum;
  }
  __syncthreads();
}

// out (T, H V); q (T, H (N + P)); kv_b (H (N + V), R); cache as above; dynamic shared memory as
// above (mla_attention_smem_bytes). V: elements per load, kVec16<T> when R and P are multiples of
// it (16-byte aligned rows), else 1. A block per (query token, head): q_lat, then the token's
// causal context (attend_keys, mla_device.cuh), then out = W_UV o (project_out).
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    mla_attention_kernel(const T* __restrict__ q, const T* __restrict__ kv_b,
                         const T* __restrict__ cache, const int32_t* __restrict__ query_start,
                         const int32_t* __restrict__ context_lens,
                         const int32_t* __restrict__ block_tables, int max_blocks_per_seq,
                         int num_seqs, int block_size, MlaShape s, T* __restrict__ out) {
  extern __shared__ float mla_smem[];
  __shared__ float scores[kKeysPerRound];
  __shared__ int64_t entries[kKeysPerRound];  // the round's keys' cache offsets, -1: none
  const int r = s.kv_lora_rank, p = s.qk_rope_head_dim, n = s.qk_nope_head_dim;
  const int v = s.v_head_dim, width = r + p;
  float* q_cat = mla_smem;             // (R + P)
  float* q_nope_s = mla_smem + width;  // (N)
  float* partial = q_nope_s + n;       // (kPartialFloats), then o (R)
  const int t = static_cast<int>(blockIdx.x) / s.num_heads;
  const int head = static_cast<int>(blockIdx.x) % s.num_heads;
  const T* w_uk = kv_b + int64_t{head} * (n + v) * r;  // (N, R)
  const T* w_uv = w_uk + int64_t{n} * r;               // (V, R)
  pdl_wait();
  pdl_trigger();
  const QueryPlace at = place_of(query_start, context_lens, num_seqs, t);
  T* dst = out + (int64_t{t} * s.num_heads + head) * v;
  if (at.pos < 0) {  // a decode bucket's padding row (no context): zeros, not 0 / 0
    for (int i = threadIdx.x; i < v; i += kThreads) dst[i] = from_f32<T>(0.0f);
    return;
  }
  const T* q_head = q + (int64_t{t} * s.num_heads + head) * (n + p);
  for (int i = threadIdx.x; i < n; i += kThreads) q_nope_s[i] = to_f32(q_head[i]);
  for (int i = threadIdx.x; i < p; i += kThreads) q_cat[r + i] = to_f32(q_head[n + i]);
  __syncthreads();
  latent_query<T, V>(w_uk, q_nope_s, n, r, partial, q_cat);
  SoftmaxState<V> st;
  attend_keys<T, V>(q_cat, cache, block_tables + int64_t{at.seq} * max_blocks_per_seq, block_size,
                    r, width, s.scale, 0, at.pos + 1, st, scores, entries);
  float* o_s = partial;
#pragma unroll
  for (int c = 0; c < kItems<V>; ++c) {
    const int j = (threadIdx.x + c * kThreads) * kPer<V>;
#pragma unroll
    for (int u = 0; u < kPer<V>; ++u) {
      if (j + u < r) o_s[j + u] = st.o[c][u] / st.run_sum;
    }
  }
  __syncthreads();
  project_out<T, V>(w_uv, o_s, r, 0, v, dst);
}

}  // namespace mla

size_t mla_attention_smem_bytes(const MlaShape& shape) {
  const auto floats = static_cast<size_t>(shape.kv_lora_rank) + shape.qk_rope_head_dim +
                      shape.qk_nope_head_dim + mla::kPartialFloats;
  return floats * sizeof(float);
}

bool mla_shape_supported(const MlaShape& shape) {
  return shape.kv_lora_rank >= 1 && shape.kv_lora_rank <= kMlaMaxLatent &&
         shape.qk_rope_head_dim % 2 == 0 && shape.qk_rope_head_dim <= kMlaMaxRopeDim &&
         shape.num_heads >= 1 && shape.qk_nope_head_dim >= 1 &&
         shape.qk_nope_head_dim <= kMlaMaxNopeDim && shape.v_head_dim >= 1;
}

void launch_mla_rope_and_cache(Tensor q, Tensor latent, const Tensor& kv_norm, float eps,
                               const Tensor& positions, const Tensor& slot_mapping,
                               const Tensor& inv_freq, const KvCacheLayer& kv,
                               const MlaShape& shape, cudaStream_t stream, bool pdl) {
  const int64_t t = q.rows();
  if (t == 0) return;
  IB_DISPATCH_FLOAT(q.dtype, T, {
    launch_kernel("mla_rope_and_cache", pdl, mla::mla_rope_and_cache_kernel<T>,
                  dim3(static_cast<unsigned>(t)), dim3(mla::kThreads), 0, stream, q.as<T>(),
                  latent.as<T>(), kv_norm.as<const T>(), eps, positions.as<const int32_t>(),
                  slot_mapping.as<const int32_t>(), inv_freq.as<const float>(), kv.k.as<T>(),
                  kv.block_size, shape);
  });
}

void launch_mla_attention(const Tensor& q, const Tensor& kv_b, const KvCacheLayer& kv,
                          const AttentionMetadata& meta, const MlaShape& shape, Tensor out,
                          cudaStream_t stream, bool pdl) {
  const int64_t t = q.rows();
  if (t == 0) return;
  const size_t smem = mla_attention_smem_bytes(shape);
  IB_DISPATCH_FLOAT(q.dtype, T, {
    constexpr int kV = kVec16<T>;
    const bool vec = shape.kv_lora_rank % kV == 0 && shape.qk_rope_head_dim % kV == 0;
    auto* kernel = vec ? mla::mla_attention_kernel<T, kV> : mla::mla_attention_kernel<T, 1>;
    launch_kernel("mla_attention", pdl, kernel, dim3(static_cast<unsigned>(t * shape.num_heads)),
                  dim3(mla::kThreads), smem, stream, q.as<const T>(), kv_b.as<const T>(),
                  kv.k.as<const T>(), meta.query_start.as<const int32_t>(),
                  meta.context_lens.as<const int32_t>(), meta.block_tables.as<const int32_t>(),
                  static_cast<int>(meta.block_tables.dim(1)), meta.num_seqs, kv.block_size, shape,
                  out.as<T>());
  });
}

}  // namespace ib::cuda
