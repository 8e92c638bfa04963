// Device helpers of the mixture-of-experts expert kernels (moe.cu's warp-per-row form and
// moe_tiles.cu's tile form): 16-byte loads as floats, the expert a block serves, the pairs routed
// to it, SiLU.
#pragma once

#include <cstdint>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/moe_kernels.h"

namespace ib::cuda::moe {

// Pairs of one token chunk (shared memory holds their indices: 8 KiB).
inline constexpr int kMaxChunkPairs = 2048;

// Operands of an expert kernel (moe_tiles.cu, moe_int4.cu). x row of pair p: x + (p /
// tokens_per_pair) * x_stride; K = k_dim. gate_up: out act (stride n_out = F; the weight's rows
// F.. its up rows); down: out y (stride n_out = D, f32).
template <typename T>
struct TileArgs {
  const T* x;
  int64_t x_stride;
  int tokens_per_pair;
  int64_t k_dim;
  int64_t n_out;
  T* act;
  float* y;
};

// V elements of T from p as floats: one 16-byte load (weights: streamed past L1) or one element.
template <typename T, int V, bool kStream>
__device__ __forceinline__ void load_vec(const T* p, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = to_f32(*p);
  } else {
    static_assert(V == kVec16<T>, "a vector is 16 bytes");
    uint4 raw;
    if constexpr (kStream) {
      raw = load_stream16(p);
    } else {
      raw = *reinterpret_cast<const uint4*>(p);
    }
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) out[i] = to_f32(e[i]);
  }
}

// The expert a block row serves: the slot-th smallest distinct expert id among the chunk's pairs,
// -1 past the last (the same for the whole block). The grids have min(E, pairs) rows, not E: at
// decode only the routed experts' blocks are launched (6 of 64 rows for DeepSeek-V2-Lite at batch
// 1), not a block per expert that finds no pair and exits.
__device__ inline int expert_of_slot(const int32_t* ids, int pairs, int slot, unsigned* present,
                                     int* expert) {
  constexpr int kWords = kMoeMaxExperts / 32;
  for (int w = threadIdx.x; w < kWords; w += blockDim.x) present[w] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int e = ids[p];
    if (e >= 0 && e < kMoeMaxExperts) atomicOr(&present[e / 32], 1u << (e % 32));
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int left = slot, found = -1;
    for (int w = 0; w < kWords && found < 0; ++w) {
      const int c = __popc(present[w]);
      if (left < c) {
        unsigned bits = present[w];
        for (int i = 0; i < left; ++i) bits &= bits - 1;  // drop the lowest `left` set bits
        found = w * 32 + __ffs(static_cast<int>(bits)) - 1;
      } else {
        left -= c;
      }
    }
    *expert = found;
  }
  __syncthreads();
  return *expert;
}

// The chunk's pairs routed to expert `e`, into list (shared); returns their count. Order is
// irrelevant: each pair's results land in its own row.
__device__ inline int collect_pairs(const int32_t* ids, int pairs, int e, int* list, int* count) {
  if (threadIdx.x == 0) *count = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < pairs; p += blockDim.x) {
    if (ids[p] == e) list[atomicAdd(count, 1)] = p;
  }
  __syncthreads();
  return *count;
}

// A block's expert and the chunk's pairs routed to it, in shared memory (slot_pairs).
struct SlotPairs {
  int list[kMaxChunkPairs];
  int count, expert;
  unsigned present[kMoeMaxExperts / 32];
};

// The expert of the block's grid row (blockIdx.y: expert_of_slot) into *e and its pairs into
// s.list; returns their count, 0 where the row has no expert (past the chunk's distinct ones) or
// the expert no pair.
__device__ inline int slot_pairs(const int32_t* ids, int pairs, SlotPairs& s, int* e) {
  *e = expert_of_slot(ids, pairs, static_cast<int>(blockIdx.y), s.present, &s.expert);
  if (*e < 0) return 0;
  return collect_pairs(ids, pairs, *e, s.list, &s.count);
}

}  // namespace ib::cuda::moe
