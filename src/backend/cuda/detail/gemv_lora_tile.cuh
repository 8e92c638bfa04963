// The decode GEMV's LoRA variant (gemv_kernel.cuh's kLora): a block's adapter operands staged in
// shared memory, the LoRA term the epilogue adds to each result, and the chained shrink of the
// next op's input from the outputs just stored.
#pragma once

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/gemv_steps.cuh"
#include "backend/cuda/detail/lora_kernels.h"
#include "backend/cuda/detail/lora_shrink.cuh"  // lora_pick
#include "backend/cuda/detail/mma.cuh"

namespace ib::cuda {

// kLora (GemvLora, lora_kernels.h): a block's LoRA operands in shared memory. The dynamic part
// (gemv_lora_smem_bytes) holds u (8 tokens x G R fp32) then B (8 tokens x 16 tile rows x R);
// tile row j is the row result(token, j) of the epilogue computes (j < 8: the lane row r = j's
// row_a, else r = j - 8's row_b).
template <typename T>
struct GemvLoraSmem {
  float* u;      // (8, G R)
  T* b;          // (8, 16, R)
  int* slot;     // (8) the token's slot, -1: none
  float* scale;  // (8) its scale
  int* target;   // (16) the tile row's target, -1: none
  float* chain;  // (8, 16) the tile's outputs as stored, for a chained shrink (GemvLora::next_u)
};

// The tile's slots, scales and row targets (row_of(j): the tile row's weight row) into shared
// memory, and each token's slot's B rows by cp.async (waited for with u before the epilogue, whose
// barrier publishes it all). No barrier here: a block calls it right after issuing its first
// weight loads, before it waits for the previous kernel (B and the slot ids are constant during
// a step).
template <typename T, typename RowOf>
__device__ __forceinline__ void gemv_lora_stage_b(const GemvLora& l, int m, const RowOf& row_of,
                                                  const GemvLoraSmem<T>& sm) {
  const LoraGroupPtrs& grp = l.group;
  const auto slot_of = [&](int t) {
    const int s = t < m ? l.slot_ids[t] : -1;
    return s < l.num_slots ? s : -1;
  };
  const auto target_of = [&](int j) {
    const int64_t row = row_of(j);
    int g = -1;
#pragma unroll
    for (int i = 0; i < LoraOps::kMaxLoraGroup; ++i) {
      if (i < grp.count && row >= grp.row_offset[i] && row < grp.row_offset[i] + grp.n[i]) g = i;
    }
    return g;
  };
  if (threadIdx.x < 8) {
    const int t = static_cast<int>(threadIdx.x);
    const int s = slot_of(t);
    sm.slot[t] = s;
    sm.scale[t] = s >= 0 ? l.scales[s] : 0.0f;
  } else if (threadIdx.x < 8 + kGemvRows) {
    sm.target[threadIdx.x - 8] = target_of(static_cast<int>(threadIdx.x) - 8);
  }
  constexpr int kPerCopy = 16 / static_cast<int>(sizeof(T));
  const int copies = l.rank / kPerCopy;  // per row
  for (int e = static_cast<int>(threadIdx.x); e < 8 * kGemvRows * copies;
       e += static_cast<int>(blockDim.x)) {
    const int t = e / (kGemvRows * copies), j = (e / copies) % kGemvRows, c = e % copies;
    const int s = slot_of(t), g = target_of(j);
    if (s < 0 || g < 0) continue;
    const int64_t n = row_of(j) - lora_pick(grp.row_offset, g);
    const T* src = static_cast<const T*>(lora_pick(grp.b, g)) +
                   (int64_t{s} * lora_pick(grp.n, g) + n) * l.rank + c * kPerCopy;
    cp_async16(sm.b + (t * kGemvRows + j) * l.rank + c * kPerCopy, src, true);
  }
  cp_async_commit();
}

// A chained shrink's A rows (GemvLora::next) over the tile's output features [f0, f0 + 16 or 8)
// into L2 for each token's slot, before the block waits (A is constant during a step).
template <typename T>
__device__ __forceinline__ void gemv_lora_prefetch_next(const GemvLora& l, int m, int64_t f0,
                                                        int n_out) {
  const int gr = l.next.count * l.rank;
  for (int p = static_cast<int>(threadIdx.x); p < m * gr; p += static_cast<int>(blockDim.x)) {
    const int s = l.slot_ids[p / gr], row = p % gr;
    if (s < 0 || s >= l.num_slots) continue;
    const T* a = static_cast<const T*>(lora_pick(l.next.a, row / l.rank));
    prefetch_l2(a + (int64_t{s} * l.rank + row % l.rank) * n_out + f0);
  }
}

// The chained shrink's share of the tile (kF output features from f0, stored in sm.chain): one
// (token, row of the next group's G R) a thread, fp32 atomics into next_u (GemvLora).
template <typename T, int kF>
__device__ __forceinline__ void gemv_lora_chain(const GemvLora& l, const GemvLoraSmem<T>& sm,
                                                int64_t f0, int n_out) {
  static_assert(kF % kVec16<T> == 0, "whole 16-byte loads of A");
  const int gr = l.next.count * l.rank;
  for (int p = static_cast<int>(threadIdx.x); p < 8 * gr; p += static_cast<int>(blockDim.x)) {
    const int t = p / gr, row = p % gr;
    const int s = sm.slot[t];
    if (s < 0) continue;
    const T* a = static_cast<const T*>(lora_pick(l.next.a, row / l.rank)) +
                 (int64_t{s} * l.rank + row % l.rank) * n_out + f0;
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kF; c += kVec16<T>) {
      float av[kVec16<T>];
      load16_f32<T>(a + c, av);
#pragma unroll
      for (int v = 0; v < kVec16<T>; ++v) sum += av[v] * sm.chain[t * kGemvRows + c + v];
    }
    atomicAdd(l.next_u + t * gr + row, sum);
  }
}

// u's rows of the 8 tokens (G R fp32 each, contiguous; rows of base tokens and past M are copied
// too and never read) into u_s by the calling warp, 16 bytes a lane at a time by cp.async
// (waited for with the B rows). u was written by the kernels before this one (a launched shrink,
// or the GEMV before it for a chained shrink).
__device__ __forceinline__ void gemv_lora_copy_u(const GemvLora& l, float* u_s, int lane) {
  const int chunks = 8 * l.group.count * l.rank / 4;
  for (int c = lane; c < chunks; c += 32) cp_async16(u_s + 4 * c, l.u + 4 * c, true);
}

// The LoRA term of (token, tile row j), fp32: 0 for a base token or a row no target covers.
template <typename T>
__device__ __forceinline__ float gemv_lora_term(const GemvLora& l, const GemvLoraSmem<T>& sm,
                                                int token, int j) {
  const int g = sm.target[j];
  if (sm.slot[token] < 0 || g < 0) return 0.0f;
  const T* b = sm.b + (token * kGemvRows + j) * l.rank;
  const float* u = sm.u + (token * l.group.count + g) * l.rank;
  constexpr int kV = kVec16<T>;
  float sum = 0.0f;
  for (int r = 0; r < l.rank; r += kV) {
    float bv[kV];
    load16_f32<T>(b + r, bv);
#pragma unroll
    for (int v = 0; v < kV; ++v) sum += bv[v] * u[r + v];
  }
  return sm.scale[token] * sum;
}

}  // namespace ib::cuda
