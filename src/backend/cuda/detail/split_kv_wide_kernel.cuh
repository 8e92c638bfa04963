// The wide split-KV decode kernel (bf16 / fp16): each warp takes 16 keys at a time and issues
// all of their K and V loads at once, so a warp's 16 keys cost one memory round trip instead of
// the one-key-per-lane kernel's six (two K batches, four V batches). Two lanes share a key for
// the scores (each half of head_dim, 16-byte loads, the halves interleaved by 16 bytes); for
// P·V every lane owns a head_dim slice of all 16 keys, as in the other kernel, so both end in
// finish_split_block. With min_partition set, a short context is spread over the partitions of
// a grid sized for the longest one (a captured decode graph's), so batch 1 at context 160 runs
// on 3 blocks per KV head instead of one.
#pragma once

#include <cmath>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/pdl.cuh"
#include "backend/cuda/detail/split_kv_kernel.cuh"

namespace ib::cuda {

inline constexpr int kWideKeys = 16;  // keys per warp and step

// kN elements of T from one V row, loaded as one access when the slice is 4 or 8 bytes.
template <typename T, int kN>
struct alignas(sizeof(T) * kN == 8 ? 8 : (sizeof(T) * kN == 4 ? 4 : sizeof(T))) WideSlice {
  T e[kN];
};

// Max (and sum) over the 16 keys of a warp step, whose two lanes hold the same value.
__device__ __forceinline__ float keys_max(float v) {
#pragma unroll
  for (int o = 16; o > 1; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
__device__ __forceinline__ float keys_sum(float v) {
#pragma unroll
  for (int o = 16; o > 1; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// grid (T, Hkv * head_chunks, P); GC query heads per block; HD head_dim; kWarps warps.
template <typename T, int HD, int GC, int kWarps>
__global__ void __launch_bounds__(kWarps * 32) split_kv_wide_kernel(SplitParams p) {
  static_assert(sizeof(T) == 2, "the wide kernel reads 16-bit caches");
  constexpr int kThreads = kWarps * 32;
  constexpr int kVd = HD / 32;      // head_dim elements per lane in P·V
  constexpr int kChunks = HD / 16;  // 16-byte K chunks per lane (half a row)
  __shared__ __align__(16) float q_s[GC][HD];
  __shared__ float p_s[kWarps][kWideKeys][GC];
  pdl_wait();
  pdl_trigger();

  const int t = blockIdx.x;
  const int chunks_per_kv = (p.group + GC - 1) / GC;
  const int kv_head = blockIdx.y / chunks_per_kv;
  const int head0 = kv_head * p.group + (blockIdx.y % chunks_per_kv) * GC;
  const int gc = min(GC, kv_head * p.group + p.group - head0);
  const int part = blockIdx.z;
  const QueryView qv = query_view(p, t);
  const int psize = partition_size_for(p, qv.kv_len);
  const int p_begin = part * psize;
  if (p_begin >= qv.kv_len) return;  // this partition is past the query's keys (uniform)
  const int p_end = min(qv.kv_len, p_begin + psize);
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int half = lane & 1;   // which 16-byte chunks of the key row this lane scores
  const int slot = lane >> 1;  // which of the step's 16 keys

  const int64_t qkv_stride = int64_t{p.num_heads + 2 * p.num_kv_heads} * HD;
  const T* q = static_cast<const T*>(p.qkv) + t * qkv_stride + int64_t{head0} * HD;
  for (int i = threadIdx.x; i < GC * HD; i += kThreads)
    q_s[i / HD][i % HD] = i / HD < gc ? to_f32(q[i]) * p.scale_log2 : 0.0f;
  __syncthreads();

  const T* k_cache = static_cast<const T*>(p.k_cache);
  const T* v_cache = static_cast<const T*>(p.v_cache);
  float m[GC], l[GC], acc[GC][kVd];
#pragma unroll
  for (int g = 0; g < GC; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < kVd; ++i) acc[g][i] = 0.0f;
  }

  const int first = max(p_begin, qv.key_begin);
  for (int base = first + warp * kWideKeys; base < p_end; base += kWarps * kWideKeys) {
    const int key = base + slot;
    const bool valid = key < p_end;
    const int64_t row =
        valid ? cache_row(p.batch, qv.seq, key, kv_head, p.num_kv_heads, HD) : int64_t{0};
    const int n = min(kWideKeys, p_end - base);

    // Every load of the step goes out before any of it is used.
    uint4 kraw[kChunks];
#pragma unroll
    for (int c = 0; c < kChunks; ++c)
      kraw[c] = *reinterpret_cast<const uint4*>(k_cache + row + (2 * c + half) * 8);
    WideSlice<T, kVd> vraw[kWideKeys];
#pragma unroll
    for (int u = 0; u < kWideKeys; ++u) {
      const int64_t vrow = __shfl_sync(0xffffffffu, row, 2 * u);
      if (u < n) {
        vraw[u] = *reinterpret_cast<const WideSlice<T, kVd>*>(v_cache + vrow + lane * kVd);
      } else {
#pragma unroll
        for (int i = 0; i < kVd; ++i) vraw[u].e[i] = from_f32<T>(0.0f);
      }
    }

    float s[GC];
#pragma unroll
    for (int g = 0; g < GC; ++g) s[g] = 0.0f;
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      const uint32_t w[4] = {kraw[c].x, kraw[c].y, kraw[c].z, kraw[c].w};
      const int d0 = (2 * c + half) * 8;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 kf = unpack2_f32<T>(w[j]);
#pragma unroll
        for (int g = 0; g < GC; ++g) {
          const float2 qf = *reinterpret_cast<const float2*>(&q_s[g][d0 + 2 * j]);
          s[g] += qf.x * kf.x + qf.y * kf.y;
        }
      }
    }
#pragma unroll
    for (int g = 0; g < GC; ++g) {
      s[g] += __shfl_xor_sync(0xffffffffu, s[g], 1);
      const float sg = valid ? s[g] : -INFINITY;
      const float m_new = fmaxf(m[g], keys_max(sg));
      const float ref = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[g] - ref);
      const float pg = exp2f(sg - ref);
      l[g] = l[g] * alpha + keys_sum(pg);
#pragma unroll
      for (int i = 0; i < kVd; ++i) acc[g][i] *= alpha;
      m[g] = m_new;
      if (half == 0) p_s[warp][slot][g] = pg;
    }
    __syncwarp();
#pragma unroll
    for (int u = 0; u < kWideKeys; ++u) {
      float vf[kVd];
#pragma unroll
      for (int i = 0; i < kVd; ++i) vf[i] = to_f32(vraw[u].e[i]);
#pragma unroll
      for (int g = 0; g < GC; ++g) {
        const float pj = p_s[warp][u][g];
#pragma unroll
        for (int i = 0; i < kVd; ++i) acc[g][i] += pj * vf[i];
      }
    }
    __syncwarp();
  }

  finish_split_block<T, HD, GC, kWarps>(p, qv, t, head0, gc, part, psize, m, l, acc);
}

}  // namespace ib::cuda
