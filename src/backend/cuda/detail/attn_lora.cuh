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

// The finishing block of (token t, chunk y): a_s holds the chunk's n columns (from col0, at most
// kMaxN) of a, rounded to T, in shared memory after a barrier; r_s (shared, not the same) gets
// r's same columns here. Each warp takes kBatch rows at a time, every load of them issued before
// any is used (a round trip a batch, not one a row and column step: the form measured in session
// 49 walked them one after another), its lanes 16 bytes of columns; then the grid's last
// finishing block sums the chunks, kSumItems (token, row) sums a thread, all their loads at once.
// Every block of the chunk's (token, y) pairs calls it exactly once; all of its threads call it.
template <typename T, int kWarps, int kMaxN>
__device__ __forceinline__ void attn_lora_finish(const AttnLora& l, int t, int64_t k, int64_t col0,
                                                 int n, const float* a_s, float* r_s) {
  constexpr int kV = kVec16<T>;
  constexpr int kThreads = kWarps * 32;
  constexpr int kPer = (kMaxN + 32 * kV - 1) / (32 * kV);  // a lane's vectors of a row
  constexpr int kBatch = 6;                                // rows a warp has in flight
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
    float* part = l.partials + (int64_t{t} * chunks + blockIdx.y) * rows;
    for (int row0 = warp * kBatch; row0 < rows; row0 += kWarps * kBatch) {
      uint4 w1[kBatch][kPer] = {}, w2[kBatch][kPer] = {};
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int row = row0 + b;
        if (row >= rows) continue;
        const T* p1 = attn_lora_row<T>(l, row, s, k, col0, false);
        const T* p2 = row >= cur_rows ? attn_lora_row<T>(l, row, s, k, col0, true) : nullptr;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const int c = (i * 32 + lane) * kV;
          if (c >= n) continue;
          w1[b][i] = *reinterpret_cast<const uint4*>(p1 + c);
          if (p2 != nullptr) w2[b][i] = *reinterpret_cast<const uint4*>(p2 + c);
        }
      }
      float sum[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        sum[b] = 0.0f;
#pragma unroll
        for (int i = 0; i < kPer; ++i) {
          const int c = (i * 32 + lane) * kV;
          if (c >= n) continue;
          const T* e1 = reinterpret_cast<const T*>(&w1[b][i]);
#pragma unroll
          for (int v = 0; v < kV; ++v) sum[b] += to_f32(e1[v]) * a_s[c + v];
          if (row0 + b >= cur_rows) {
            const T* e2 = reinterpret_cast<const T*>(&w2[b][i]);
#pragma unroll
            for (int v = 0; v < kV; ++v) sum[b] += to_f32(e2[v]) * r_s[c + v];
          }
        }
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) sum[b] = warp_sum(sum[b]);
      if (lane == 0) {
#pragma unroll
        for (int b = 0; b < kBatch; ++b) {
          if (row0 + b < rows) part[row0 + b] = sum[b];
        }
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
  // The chunks' partials of kSumItems (token, row) pairs a thread, kSumChunks chunks at a time,
  // read together with the tokens' slot ids (a token of the base model's partials are unwritten:
  // read, never used); each sum in chunk order.
  constexpr int kSumItems = 4, kSumChunks = 8;
  const int total = static_cast<int>(gridDim.x) * rows;
  for (int e0 = static_cast<int>(threadIdx.x); e0 < total; e0 += kThreads * kSumItems) {
    float sum[kSumItems];
    int slot[kSumItems];
#pragma unroll
    for (int i = 0; i < kSumItems; ++i) {
      const int e = e0 + i * kThreads;
      sum[i] = 0.0f;
      slot[i] = e < total ? l.slot_ids[e / rows] : -1;
    }
    for (int y0 = 0; y0 < chunks; y0 += kSumChunks) {
      float v[kSumItems][kSumChunks];
#pragma unroll
      for (int i = 0; i < kSumItems; ++i) {
        const int e = e0 + i * kThreads;
        const float* part = l.partials + int64_t{e / rows} * chunks * rows + e % rows;
#pragma unroll
        for (int j = 0; j < kSumChunks; ++j) {
          v[i][j] = e < total && y0 + j < chunks ? __ldcg(part + int64_t{y0 + j} * rows) : 0.0f;
        }
      }
#pragma unroll
      for (int i = 0; i < kSumItems; ++i) {
#pragma unroll
        for (int j = 0; j < kSumChunks; ++j) {
          if (y0 + j < chunks) sum[i] += v[i][j];
        }
      }
    }
#pragma unroll
    for (int i = 0; i < kSumItems; ++i) {
      const int e = e0 + i * kThreads;
      if (e >= total || slot[i] < 0 || slot[i] >= l.num_slots) continue;
      const int tt = e / rows, row = e % rows;
      if (row < cur_rows) {
        l.u[tt * cur_rows + row] = sum[i];
      } else {
        l.u_next[tt * next_rows + row - cur_rows] = sum[i];
      }
    }
  }
}

}  // namespace ib::cuda
