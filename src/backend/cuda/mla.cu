// Multi-head latent attention on CUDA (backend/ops.h MlaOps, DeepSeek-V2), as the CPU backend
// computes it (cpu/mla.cpp, the oracle), in fp32 with x's dtype in memory.
//
// mla_rope_and_cache_kernel: a block per token normalises the latent c, rotates k_pe and every
// head's q_pe (DeepSeek's interleaved pairs, rope_scale folded into cos and sin) and writes
// [c | k_pe] to the cache. mla_attention_kernel: a block per (query token, head). The block turns
// q_nope into the latent space (q_lat = W_UK^T q_nope, a thread per latent column), then walks the
// token's causal context 8 keys at a time (a warp per key scores q_lat . c + q_pe . k_pe; an online
// softmax rescales the running sum and each thread's two latent columns of o), and finally
// out = W_UV o, a warp per output row. Correctness first: each key's latent is read by its
// scoring warp and again by every thread for o, and each head's block reads the whole context;
// a decode kernel sharing the latents across heads is the next step (bench/NOTES.md).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/mla_kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace mla {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeysPerRound = kWarps;  // a warp scores one key of a round

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

// The sequence of query token t: the last s with query_start[s] <= t.
__device__ __forceinline__ int seq_of(const int32_t* query_start, int num_seqs, int t) {
  int lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (query_start[mid] <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

// out (T, H V); q (T, H (N + P)); kv_b (H (N + V), R); cache as above. Dynamic shared memory:
// q_lat (R) and o (R) in fp32 (mla_attention_smem_bytes).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    mla_attention_kernel(const T* __restrict__ q, const T* __restrict__ kv_b,
                         const T* __restrict__ cache, const int32_t* __restrict__ query_start,
                         const int32_t* __restrict__ context_lens,
                         const int32_t* __restrict__ block_tables, int max_blocks_per_seq,
                         int num_seqs, int block_size, MlaShape s, T* __restrict__ out) {
  extern __shared__ float mla_smem[];
  __shared__ float q_pe_s[kMlaMaxRopeDim];
  __shared__ float scores[kKeysPerRound];
  __shared__ int64_t entries_s[kKeysPerRound];  // the round's keys' cache offsets, -1: none
  const int r = s.kv_lora_rank, p = s.qk_rope_head_dim, n = s.qk_nope_head_dim;
  const int v = s.v_head_dim, width = r + p;
  float* q_lat = mla_smem;    // (R)
  float* o_s = mla_smem + r;  // (R), the final o
  const int t = static_cast<int>(blockIdx.x) / s.num_heads;
  const int head = static_cast<int>(blockIdx.x) % s.num_heads;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const T* w_uk = kv_b + int64_t{head} * (n + v) * r;  // (N, R)
  const T* w_uv = w_uk + int64_t{n} * r;               // (V, R)
  pdl_wait();
  pdl_trigger();
  const int seq = seq_of(query_start, num_seqs, t);
  const int q_len = query_start[seq + 1] - query_start[seq];
  const int pos = context_lens[seq] - q_len + (t - query_start[seq]);
  const int32_t* table = block_tables + int64_t{seq} * max_blocks_per_seq;
  T* dst = out + (int64_t{t} * s.num_heads + head) * v;
  if (pos < 0) {  // a decode bucket's padding row (no context): zeros, not 0 / 0
    for (int i = threadIdx.x; i < v; i += kThreads) dst[i] = from_f32<T>(0.0f);
    return;
  }
  const T* q_nope = q + (int64_t{t} * s.num_heads + head) * (n + p);
  for (int i = threadIdx.x; i < p; i += kThreads) q_pe_s[i] = to_f32(q_nope[n + i]);
  // q_lat = W_UK^T q_nope: a thread per latent column.
  for (int j = threadIdx.x; j < r; j += kThreads) {
    float acc = 0.0f;
    for (int i = 0; i < n; ++i) acc += to_f32(q_nope[i]) * to_f32(w_uk[int64_t{i} * r + j]);
    q_lat[j] = acc;
  }
  __syncthreads();
  // The running softmax: max, sum, and o over the thread's latent columns j = tid + kThreads c.
  constexpr int kCols = kMlaMaxLatent / kThreads;
  float o[kCols] = {};
  float run_max = -INFINITY, run_sum = 0.0f;
  for (int base = 0; base <= pos; base += kKeysPerRound) {
    const int key = base + warp;
    if (key <= pos) {
      const int64_t entry =
          (int64_t{table[key / block_size]} * block_size + key % block_size) * width;
      const T* e = cache + entry;
      float dot = 0.0f;
      for (int j = lane; j < r; j += 32) dot += q_lat[j] * to_f32(e[j]);
      for (int j = lane; j < p; j += 32) dot += q_pe_s[j] * to_f32(e[r + j]);
      dot = warp_sum(dot);
      if (lane == 0) {
        scores[warp] = dot * s.scale;
        entries_s[warp] = entry;
      }
    } else if (lane == 0) {
      scores[warp] = -INFINITY;
      entries_s[warp] = -1;
    }
    __syncthreads();
    float round_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kKeysPerRound; ++w) round_max = fmaxf(round_max, scores[w]);
    const float new_max = fmaxf(run_max, round_max);
    const float alpha = expf(run_max - new_max);  // 0 on the first round (run_max = -inf)
    run_sum *= alpha;
#pragma unroll
    for (int c = 0; c < kCols; ++c) o[c] *= alpha;
#pragma unroll
    for (int w = 0; w < kKeysPerRound; ++w) {
      if (entries_s[w] < 0) continue;
      const float pw = expf(scores[w] - new_max);
      run_sum += pw;
      const T* e = cache + entries_s[w];
#pragma unroll
      for (int c = 0; c < kCols; ++c) {
        const int j = threadIdx.x + c * kThreads;
        if (j < r) o[c] += pw * to_f32(e[j]);
      }
    }
    run_max = new_max;
    __syncthreads();  // the round's scores read before the next round writes them
  }
#pragma unroll
  for (int c = 0; c < kCols; ++c) {
    const int j = threadIdx.x + c * kThreads;
    if (j < r) o_s[j] = o[c] / run_sum;
  }
  __syncthreads();
  // out[head] = W_UV o: a warp per output row.
  for (int i = warp; i < v; i += kWarps) {
    const T* row = w_uv + int64_t{i} * r;
    float acc = 0.0f;
    for (int j = lane; j < r; j += 32) acc += to_f32(row[j]) * o_s[j];
    acc = warp_sum(acc);
    if (lane == 0) dst[i] = from_f32<T>(acc);
  }
}

}  // namespace mla

size_t mla_attention_smem_bytes(const MlaShape& shape) {
  return 2 * static_cast<size_t>(shape.kv_lora_rank) * sizeof(float);
}

bool mla_shape_supported(const MlaShape& shape) {
  return shape.kv_lora_rank >= 1 && shape.kv_lora_rank <= kMlaMaxLatent &&
         shape.qk_rope_head_dim % 2 == 0 && shape.qk_rope_head_dim <= kMlaMaxRopeDim &&
         shape.num_heads >= 1 && shape.qk_nope_head_dim >= 1 && shape.v_head_dim >= 1;
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
    launch_kernel("mla_attention", pdl, mla::mla_attention_kernel<T>,
                  dim3(static_cast<unsigned>(t * shape.num_heads)), dim3(mla::kThreads), smem,
                  stream, q.as<const T>(), kv_b.as<const T>(), kv.k.as<const T>(),
                  meta.query_start.as<const int32_t>(), meta.context_lens.as<const int32_t>(),
                  meta.block_tables.as<const int32_t>(), static_cast<int>(meta.block_tables.dim(1)),
                  meta.num_seqs, kv.block_size, shape, out.as<T>());
  });
}

}  // namespace ib::cuda
