// o's lookahead shrink inside the decode attention (IB_LORA_ATTN=1 on IB_LORA_IN_GEMV=5; bench/
// NOTES.md, "o's lookahead inside the attention"): what launch_lora_lookahead computes for the o
// op, u = A_o[s] . a and u_next = M_g[s] . a + A'_g[s] . r, summed by the attention's own blocks.
// Each (token, KV-head chunk) of the split-KV grid has one block that finishes its heads (the
// direct block, or the last of its partitions to arrive, which merges them); that block holds the
// chunk's columns of a (its heads' outputs, rounded to T) and takes r's same columns, so it writes
// every row's share over those columns into a scratch, and the last finishing block of the grid
// (a counter, reset by it) sums each (token, row) over the chunks in order. Same bits run to run.
#pragma once

#include <cstdint>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/lora_kernels.h"
#include "backend/cuda/detail/lora_shrink.cuh"  // lora_pick

namespace ib::cuda {

// The A row of (row, slot s) over columns from col0 (second: next_a's, for a next row).
template <typename T>
__device__ __forceinline__ const T* attn_lora_row(const AttnLora& l, int row, int s, int64_t k,
                                                  int64_t col0, bool second) {
  const int cur_rows = l.cur.count * l.rank;
  const bool own = row < cur_rows;
  const int rr = own ? row : row - cur_rows;
  const void* base = own ? lora_pick(l.cur.a, rr / l.rank)
                         : lora_pick(second ? l.next_a.a : l.next_m.a, rr / l.rank);
  return static_cast<const T*>(base) + (int64_t{s} * l.rank + rr % l.rank) * k + col0;
}

// Before the PDL wait (A is constant during a step, the slot ids were uploaded before the step's
// first kernel): the chunk's A columns of token t's slot toward L2, by the chunk's first partition.
template <typename T, int kThreads>
__device__ __forceinline__ void attn_lora_prefetch(const AttnLora& l, int t, int64_t k,
                                                   int64_t col0, int n) {
  const int s = l.slot_ids[t];
  if (s < 0 || s >= l.num_slots) return;
  const int cur_rows = l.cur.count * l.rank, next_rows = l.next_m.count * l.rank;
  const int lines = (n * static_cast<int>(sizeof(T)) + 127) / 128;
  const int slices = cur_rows + 2 * next_rows;  // the next rows read two stacks
  for (int e = static_cast<int>(threadIdx.x); e < slices * lines; e += kThreads) {
    const int slice = e / lines, line = e % lines;
    const bool second = slice >= cur_rows + next_rows;
    const int row = second ? slice - next_rows : slice;
    prefetch_l2(reinterpret_cast<const char*>(attn_lora_row<T>(l, row, s, k, col0, second)) +
                line * 128);
  }
}

// The finishing block of (token t, chunk y): a_s and r_s hold the chunk's n columns (from col0) of
// a (rounded to T) and r in shared memory, after a barrier. Each warp takes rows, its lanes 16
// bytes of columns at a time; then the grid's last finishing block sums the chunks. Every block
// of the chunk's (token, y) pairs calls it exactly once; all of the block's threads call it.
template <typename T, int kWarps>
__device__ __forceinline__ void attn_lora_finish(const AttnLora& l, int t, int64_t k, int64_t col0,
                                                 int n, const float* a_s, const float* r_s) {
  constexpr int kV = kVec16<T>;
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int cur_rows = l.cur.count * l.rank, next_rows = l.next_m.count * l.rank;
  const int rows = cur_rows + next_rows;
  const int chunks = static_cast<int>(gridDim.y);
  const int s = l.slot_ids[t];
  if (s >= 0 && s < l.num_slots) {
    float* part = l.partials + (int64_t{t} * chunks + blockIdx.y) * rows;
    for (int row = warp; row < rows; row += kWarps) {
      const T* w1 = attn_lora_row<T>(l, row, s, k, col0, false);
      const T* w2 = row >= cur_rows ? attn_lora_row<T>(l, row, s, k, col0, true) : nullptr;
      float sum = 0.0f;
      for (int c = lane * kV; c < n; c += 32 * kV) {
        float w[kV];
        load16_f32<T>(w1 + c, w);
#pragma unroll
        for (int v = 0; v < kV; ++v) sum += w[v] * a_s[c + v];
        if (w2 != nullptr) {
          load16_f32<T>(w2 + c, w);
#pragma unroll
          for (int v = 0; v < kV; ++v) sum += w[v] * r_s[c + v];
        }
      }
      sum = warp_sum(sum);
      if (lane == 0) part[row] = sum;
    }
  }
  __shared__ bool last;
  __threadfence();  // this block's partials are visible before its arrival is counted
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned finishers = gridDim.x * gridDim.y;
    last = atomicAdd(l.counter, 1u) + 1u == finishers;
    if (last) *l.counter = 0u;  // ready for the next launch (graph replays)
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const int tokens = static_cast<int>(gridDim.x);
  for (int e = static_cast<int>(threadIdx.x); e < tokens * rows; e += kWarps * 32) {
    const int tt = e / rows, row = e % rows;
    const int st = l.slot_ids[tt];
    if (st < 0 || st >= l.num_slots) continue;
    const float* part = l.partials + int64_t{tt} * chunks * rows + row;
    float sum = 0.0f;
    for (int y = 0; y < chunks; ++y) sum += __ldcg(part + int64_t{y} * rows);
    if (row < cur_rows) {
      l.u[tt * cur_rows + row] = sum;
    } else {
      l.u_next[tt * next_rows + row - cur_rows] = sum;
    }
  }
}

}  // namespace ib::cuda
