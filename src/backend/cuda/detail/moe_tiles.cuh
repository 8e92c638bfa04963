// The expert tile kernels' shared pieces (moe_tiles.cu's block forms, moe_warps.cu's warp forms):
// the tile geometry, a thread's step over K, and the chunk's pairs sorted by expert.
#pragma once

#include <cstdint>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/moe_device.cuh"

namespace ib::cuda::moe {

inline constexpr int kTileThreads = 256;  // a block of the tile kernels
inline constexpr int kTileWarps = kTileThreads / 32;
inline constexpr int kTileRows = 8;   // weight rows a tile
inline constexpr int kTilePairs = 4;  // pairs a pass (block forms)
// Resident blocks per SM: __launch_bounds__ caps the registers at 128 for two, and ptxas uses
// 102-128 (no third fits in 64 K registers).
inline constexpr int kTileBlocksPerSm = 2;

// gate_up (kGateUp): a tile's first kRows / 2 rows are its features' gate rows, the rest their up
// rows (TileArgs: the operands).
template <bool kGateUp, int kRows = kTileRows>
constexpr int tile_features() {
  return kGateUp ? kRows / 2 : kRows;  // outputs per tile
}

// The weight rows of a tile (outputs n0 ..) of w: gate_up's first kRows / 2 its features' gate
// rows, the rest their up rows; rows past the end read the last one (their sums are never stored).
template <typename T, bool kGateUp, int kRows>
__device__ __forceinline__ void tile_rows(const TileArgs<T>& a, const T* w, int64_t n0,
                                          const T* (&rows)[kRows]) {
  constexpr int kFeatures = tile_features<kGateUp, kRows>();
  const int64_t n_out = a.n_out;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int64_t feature = n0 + r % kFeatures < n_out ? n0 + r % kFeatures : n_out - 1;
    const int64_t row = kGateUp && r >= kFeatures ? n_out + feature : feature;
    rows[r] = w + row * a.k_dim;
  }
}

// acc[r][b] += the vector of row r at c . the vector of pair b's x at c, for b < nb: every row's
// vector first (kRows loads in flight), converted as it is used.
template <typename T, int V, int kRows, int kPairs>
__device__ __forceinline__ void accumulate_vector(const T* const (&rows)[kRows],
                                                  const T* const (&xr)[kPairs], int64_t c, int nb,
                                                  float (&acc)[kRows][kPairs]) {
  T wv[kRows][V];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    if constexpr (V == 1) {
      wv[r][0] = rows[r][c];
    } else {
      *reinterpret_cast<uint4*>(wv[r]) = load_stream16(rows[r] + c);
    }
  }
#pragma unroll
  for (int b = 0; b < kPairs; ++b) {
    if (b >= nb) break;
    float xv[V];
    moe::load_vec<T, V, false>(xr[b] + c, xv);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int i = 0; i < V; ++i) acc[r][b] += to_f32(wv[r][i]) * xv[i];
    }
  }
}

// The chunk's pairs sorted by expert, in shared memory: the distinct experts ascending
// (distinct[0, n_distinct)) and each one's pairs (list[start[e], start[e] + count[e])).
struct ExpertSort {
  int list[moe::kMaxChunkPairs];
  int count[kMoeMaxExperts], start[kMoeMaxExperts], distinct[kMoeMaxExperts];
  int n_distinct;
};

// Sorts the chunk's pairs by expert into s (counts, an exclusive scan, a scatter); the whole block
// takes part and finds s complete on return. The order of an expert's pairs within its list is
// whatever order the scatter's atomics ran in, which differs between blocks: a form whose blocks
// split one expert's list between them orders it first (moe_warps.cu's ring).
__device__ inline void sort_by_expert(const int32_t* ids, int pairs, ExpertSort& s) {
  for (int i = threadIdx.x; i < kMoeMaxExperts; i += kTileThreads) s.count[i] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += kTileThreads) {
    const int e = ids[p];
    if (e >= 0 && e < kMoeMaxExperts) atomicAdd(&s.count[e], 1);
  }
  __syncthreads();
  if (threadIdx.x < 32) {  // one warp scans: lane l holds experts [l * kPer, (l + 1) * kPer)
    constexpr int kPer = kMoeMaxExperts / 32;
    const int lane = static_cast<int>(threadIdx.x), first = lane * kPer;
    int sum = 0, used = 0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      sum += s.count[first + i];
      used += s.count[first + i] > 0 ? 1 : 0;
    }
    int sum_before = sum, used_before = used;  // inclusive scans, then made exclusive
#pragma unroll
    for (int o = 1; o < 32; o *= 2) {
      const int s_up = __shfl_up_sync(0xffffffffu, sum_before, o);
      const int u_up = __shfl_up_sync(0xffffffffu, used_before, o);
      if (lane >= o) {
        sum_before += s_up;
        used_before += u_up;
      }
    }
    sum_before -= sum;
    used_before -= used;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = s.count[first + i];
      s.start[first + i] = sum_before;
      sum_before += c;
      if (c > 0) s.distinct[used_before++] = first + i;
    }
    if (lane == 31) s.n_distinct = used_before;
  }
  __syncthreads();
  for (int i = threadIdx.x; i < kMoeMaxExperts; i += kTileThreads) s.count[i] = 0;  // now cursors
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += kTileThreads) {
    const int e = ids[p];
    if (e >= 0 && e < kMoeMaxExperts) s.list[s.start[e] + atomicAdd(&s.count[e], 1)] = p;
  }
  __syncthreads();
}

}  // namespace ib::cuda::moe
