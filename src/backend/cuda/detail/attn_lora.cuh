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

// The A rows of row j (< rank) of group g (the op's own groups, then the next op's) and slot s,
// over columns from col0: p1 the op's A (own) or the next op's M, p2 the next op's A' (own: p1).
template <typename T>
__device__ __forceinline__ bool attn_lora_rows(const AttnLora& l, int g, int j, int s, int64_t k,
                                               int64_t col0, const T*& p1, const T*& p2) {
  const bool next = g >= l.cur.count;
  const int gg = next ? g - l.cur.count : g;
  const int64_t off = (int64_t{s} * l.rank + j) * k + col0;
  p1 = static_cast<const T*>(next ? lora_pick(l.next_m.a, gg) : lora_pick(l.cur.a, gg)) + off;
  p2 = next ? static_cast<const T*>(lora_pick(l.next_a.a, gg)) + off : p1;
  return next;
}

// The A row of (row, slot s) over columns from col0 (second: next_a's, for a next row).
template <typename T>
__device__ __forceinline__ const T* attn_lora_row(const AttnLora& l, int row, int s, int64_t k,
                                                  int64_t col0, bool second) {
  const T *p1, *p2;
  attn_lora_rows<T>(l, row / l.rank, row % l.rank, s, k, col0, p1, p2);
  return second ? p2 : p1;
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

// The finishing block of (token t, chunk y): a_s holds the chunk's n columns (from col0, at most
// kMaxN) of a, rounded to T, in shared memory after a barrier; r_s (shared, not the same) gets
// r's same columns here. A lane keeps its columns of a and r in registers; each warp takes kBatch
// rows at a time, their loads issued before any is used, its lanes 16 bytes of columns; then the
// grid's last finishing block sums the chunks, kSumChunks loads at a time. The code is kept
// small on purpose: each block runs it once, with its instructions not yet in the SM's cache,
// and session 51 measured the form's added advance growing with its SASS (+34 KB: +8.1 us a
// layer, +101 KB with six rows and four sums unrolled: +15.1 us; bench/NOTES.md, "The
// attention form's cost is its code"). Loops are rolled but for a batch's loads and a row's
// columns, and the caller has one call site. Every block of the chunk's (token, y) pairs calls it
// exactly once; all of its threads call it.
template <typename T, int kWarps, int kMaxN>
__device__ __forceinline__ void attn_lora_finish(const AttnLora& l, int t, int64_t k, int64_t col0,
                                                 int n, const float* a_s, float* r_s) {
  constexpr int kV = kVec16<T>;
  constexpr int kThreads = kWarps * 32;
  constexpr int kPer = (kMaxN + 32 * kV - 1) / (32 * kV);  // a lane's vectors of a row
  constexpr int kBatch = 3;                                // rows a warp has in flight
  static_assert(kMaxN / kV <= kThreads, "r's columns: one vector a thread");
  const int warp = static_cast<int>(threadIdx.x) >> 5, lane = static_cast<int>(threadIdx.x) & 31;
  const int cur_rows = l.cur.count * l.rank, next_rows = l.next_m.count * l.rank;
  const int rows = cur_rows + next_rows;
  const int chunks = static_cast<int>(gridDim.y);
  const int s = l.slot_ids[t];
  if (static_cast<int>(threadIdx.x) < n / kV) {
    const int c = static_cast<int>(threadIdx.x) * kV;
    float w[kV];
    load16_f32<T>(static_cast<const T*>(l.r) + int64_t{t} * k + col0 + c, w);
#pragma unroll
    for (int v = 0; v < kV; ++v) r_s[c + v] = w[v];
  }
  __syncthreads();
  if (s >= 0 && s < l.num_slots) {
    float av[kPer][kV], rv[kPer][kV];  // the lane's columns; past n, zeros
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int c = (i * 32 + lane) * kV;
#pragma unroll
      for (int v = 0; v < kV; ++v) {
        av[i][v] = c < n ? a_s[c + v] : 0.0f;
        rv[i][v] = c < n ? r_s[c + v] : 0.0f;
      }
    }
    float* part = l.partials + (int64_t{t} * chunks + blockIdx.y) * rows;
#pragma unroll 1
    for (int row0 = warp * kBatch; row0 < rows; row0 += kWarps * kBatch) {
      // A row of the op's own stacks reads A over a; a next row reads M over a and A' over r
      // (a zero vector where it has no second stack, or past the rows or columns).
      // One division a batch: the rows after the first step (group, row) on; a row past the
      // last loads the first's again, its sum unwritten.
      uint4 w1[kBatch][kPer], w2[kBatch][kPer];
      int g = row0 / l.rank, j = row0 - g * l.rank;
      const T *first1 = nullptr, *first2 = nullptr;
      bool first_two = false;
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const T *p1, *p2;
        bool two = attn_lora_rows<T>(l, g, j, s, k, col0, p1, p2);
        if (b == 0) {
          first1 = p1, first2 = p2, first_two = two;
        } else if (row0 + b >= rows) {
          p1 = first1, p2 = first2, two = first_two;
        }
        if (++j == l.rank) j = 0, ++g;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const int c = (i * 32 + lane) * kV;
          const bool in = c < n;
          w1[b][i] = in ? *reinterpret_cast<const uint4*>(p1 + c) : make_uint4(0, 0, 0, 0);
          w2[b][i] = in && two ? *reinterpret_cast<const uint4*>(p2 + c) : make_uint4(0, 0, 0, 0);
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        float sum = 0.0f;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const T* e1 = reinterpret_cast<const T*>(&w1[b][i]);
          const T* e2 = reinterpret_cast<const T*>(&w2[b][i]);
#pragma unroll
          for (int v = 0; v < kV; ++v) sum += to_f32(e1[v]) * av[i][v] + to_f32(e2[v]) * rv[i][v];
        }
        sum = warp_sum(sum);
        if (lane == 0 && row0 + b < rows) part[row0 + b] = sum;
      }
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
  // Each (token, row) of a token with an adapter: its chunks' partials in chunk order, kSumChunks
  // loads at a time.
  constexpr int kSumChunks = 8;
  const int total = static_cast<int>(gridDim.x) * rows;
#pragma unroll 1
  for (int e = static_cast<int>(threadIdx.x); e < total; e += kThreads) {
    const int tt = e / rows, row = e % rows;
    const int slot = l.slot_ids[tt];
    if (slot < 0 || slot >= l.num_slots) continue;
    const float* part = l.partials + int64_t{tt} * chunks * rows + row;
    float sum = 0.0f;
#pragma unroll 1
    for (int y0 = 0; y0 < chunks; y0 += kSumChunks) {
      float v[kSumChunks];
#pragma unroll
      for (int j = 0; j < kSumChunks; ++j) {
        v[j] = y0 + j < chunks ? __ldcg(part + int64_t{y0 + j} * rows) : 0.0f;
      }
#pragma unroll
      for (int j = 0; j < kSumChunks; ++j) sum += v[j];
    }
    if (row < cur_rows) {
      l.u[tt * cur_rows + row] = sum;
    } else {
      l.u_next[tt * next_rows + row - cur_rows] = sum;
    }
  }
}

}  // namespace ib::cuda
