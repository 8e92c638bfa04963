// Device code shared by the multi-head latent attention kernels (mla.cu: the fused kernel, a block
// per query token and head; mla_split.cu: the weight phases and the context split across blocks):
// loads, the query token's place in its sequence, and the online softmax over a range of keys.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/mla_kernels.h"

namespace ib::cuda::mla {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kKeysPerWarp = 4;                       // keys a warp scores per round
constexpr int kKeysPerRound = kWarps * kKeysPerWarp;  // 32
// o's latent columns per item (pairs when V > 1: R is even) and items per thread.
template <int V>
inline constexpr int kPer = V > 1 ? 2 : 1;
template <int V>
inline constexpr int kItems = kMlaMaxLatent / (kPer<V> * kThreads);

// V elements of T from p as floats: one 16-byte load (V = kVec16<T>) or one element.
template <typename T, int V>
__device__ __forceinline__ void load_f32(const T* p, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = to_f32(*p);
  } else {
    load16_f32(p, out);
  }
}

// Two consecutive elements of T (4- or 8-byte aligned) as floats.
template <typename T>
__device__ __forceinline__ void load_pair_f32(const T* p, float (&out)[2]) {
  float2 v;
  if constexpr (std::is_same_v<T, float>) {
    v = *reinterpret_cast<const float2*>(p);
  } else if constexpr (std::is_same_v<T, bf16>) {
    v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
  } else {
    v = __half22float2(*reinterpret_cast<const __half2*>(p));
  }
  out[0] = v.x;
  out[1] = v.y;
}

// acc[u] += q[i] w[i R + j0 + u] over rows i = first, first + step, ... < n (V columns of W (N,
// R)), four rows' loads in flight at a time.
template <typename T, int V>
__device__ __forceinline__ void rows_dot(const T* w, const float* q, int first, int n, int step,
                                         int r, int j0, float (&acc)[V]) {
#pragma unroll 4
  for (int i = first; i < n; i += step) {
    float wv[V];
    load_f32<T, V>(w + int64_t{i} * r + j0, wv);
    const float qi = q[i];
#pragma unroll
    for (int u = 0; u < V; ++u) acc[u] += qi * wv[u];
  }
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

// Query token t's sequence and position (its last visible key); pos < 0 on a decode bucket's
// padding row (no context).
struct QueryPlace {
  int seq, pos;
};
__device__ __forceinline__ QueryPlace place_of(const int32_t* query_start,
                                               const int32_t* context_lens, int num_seqs, int t) {
  const int seq = seq_of(query_start, num_seqs, t);
  const int q_len = query_start[seq + 1] - query_start[seq];
  return {seq, context_lens[seq] - q_len + (t - query_start[seq])};
}

// The online softmax's state: the running max and sum, and o over the thread's latent columns
// (item c holds columns (threadIdx.x + c kThreads) kPer .. + kPer - 1).
template <int V>
struct SoftmaxState {
  float o[kItems<V>][kPer<V>] = {};
  float run_max = -INFINITY, run_sum = 0.0f;
};

// Keys [k0, k1) of one sequence into `st` (the whole block calls it): rounds of kKeysPerRound
// keys, each warp scoring kKeysPerWarp of them (q_cat . [c | k_pe], q_cat the query in the cache's
// layout in shared memory, their loads in flight together), then every thread adds its columns of
// the round's latents, weighted. `scores` / `entries` are the block's shared round buffers.
template <typename T, int V>
__device__ __forceinline__ void attend_keys(const float* q_cat, const T* cache,
                                            const int32_t* table, int block_size, int r, int width,
                                            float scale, int k0, int k1, SoftmaxState<V>& st,
                                            float* scores, int64_t* entries) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int width_v = width / V;
  for (int base = k0; base < k1; base += kKeysPerRound) {
    int64_t entry[kKeysPerWarp];
    float dot[kKeysPerWarp];
#pragma unroll
    for (int kk = 0; kk < kKeysPerWarp; ++kk) {
      const int key = base + warp * kKeysPerWarp + kk;
      entry[kk] = key < k1
                      ? (int64_t{table[key / block_size]} * block_size + key % block_size) * width
                      : -1;
      dot[kk] = 0.0f;
    }
    for (int vi = lane; vi < width_v; vi += 32) {
#pragma unroll
      for (int kk = 0; kk < kKeysPerWarp; ++kk) {
        if (entry[kk] < 0) continue;
        float e[V];
        load_f32<T, V>(cache + entry[kk] + vi * V, e);
#pragma unroll
        for (int u = 0; u < V; ++u) dot[kk] += q_cat[vi * V + u] * e[u];
      }
    }
#pragma unroll
    for (int kk = 0; kk < kKeysPerWarp; ++kk) {
      const float d = warp_sum(dot[kk]);
      if (lane == 0) {
        scores[warp * kKeysPerWarp + kk] = entry[kk] < 0 ? -INFINITY : d * scale;
        entries[warp * kKeysPerWarp + kk] = entry[kk];
      }
    }
    __syncthreads();
    float round_max = -INFINITY;
#pragma unroll
    for (int w = 0; w < kKeysPerRound; ++w) round_max = fmaxf(round_max, scores[w]);
    const float new_max = fmaxf(st.run_max, round_max);
    const float alpha = expf(st.run_max - new_max);  // 0 on the first round (run_max = -inf)
    st.run_sum *= alpha;
#pragma unroll
    for (int c = 0; c < kItems<V>; ++c) {
#pragma unroll
      for (int u = 0; u < kPer<V>; ++u) st.o[c][u] *= alpha;
    }
#pragma unroll 8
    for (int w = 0; w < kKeysPerRound; ++w) {
      const int64_t ew = entries[w];
      if (ew < 0) continue;
      const float pw = expf(scores[w] - new_max);
      st.run_sum += pw;
#pragma unroll
      for (int c = 0; c < kItems<V>; ++c) {
        const int j = (threadIdx.x + c * kThreads) * kPer<V>;
        if (j >= r) continue;
        float e[kPer<V>];
        if constexpr (kPer<V> == 2) {
          load_pair_f32(cache + ew + j, e);
        } else {
          e[0] = to_f32(cache[ew + j]);
        }
#pragma unroll
        for (int u = 0; u < kPer<V>; ++u) st.o[c][u] += pw * e[u];
      }
    }
    st.run_max = new_max;
    __syncthreads();  // the round's scores read before the next round writes them
  }
}

// dst[i] = W_UV[i] . o for rows [i_begin, i_end) (W_UV (V, R) of x's dtype, o (R) fp32 in shared
// memory): a warp per kRowsPerWarp rows at a time, their loads in flight together.
template <typename T, int V>
__device__ __forceinline__ void project_out(const T* w_uv, const float* o, int r, int i_begin,
                                            int i_end, T* dst) {
  constexpr int kRowsPerWarp = 4;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r_v = r / V;
  for (int i0 = i_begin + warp * kRowsPerWarp; i0 < i_end; i0 += kWarps * kRowsPerWarp) {
    float acc[kRowsPerWarp] = {};
    for (int vi = lane; vi < r_v; vi += 32) {
#pragma unroll
      for (int rr = 0; rr < kRowsPerWarp; ++rr) {
        if (i0 + rr >= i_end) continue;
        float w[V];
        load_f32<T, V>(w_uv + int64_t{i0 + rr} * r + vi * V, w);
#pragma unroll
        for (int u = 0; u < V; ++u) acc[rr] += w[u] * o[vi * V + u];
      }
    }
#pragma unroll
    for (int rr = 0; rr < kRowsPerWarp; ++rr) {
      const float sum = warp_sum(acc[rr]);
      if (lane == 0 && i0 + rr < i_end) dst[i0 + rr] = from_f32<T>(sum);
    }
  }
}

}  // namespace ib::cuda::mla
