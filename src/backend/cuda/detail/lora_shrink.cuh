// The LoRA shrink's block (BGMV style: each token's x times its slot's A rows, every target of a
// group, fp32 into u) of lora.cu's kernels, and lora_pick, which the fused decode GEMVs' LoRA
// epilogue (detail/gemv_kernel.cuh) shares.
#pragma once

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/flag_sync.cuh"
#include "backend/cuda/detail/lora_kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {

inline constexpr int kLoraShrinkThreads = 256;  // a shrink block's warps split K between them
inline constexpr int kLoraShrinkWarps = kLoraShrinkThreads / 32;
inline constexpr int kLoraShrinkRows = 4;  // rows of the group's G x R a shrink block computes

// v[g] of a kernel parameter's array, by selects: an indexed load would copy the whole
// parameter struct to local memory first.
static_assert(LoraOps::kMaxLoraGroup == 3, "lora_pick() selects among three targets");
template <typename V>
__device__ __forceinline__ V lora_pick(const V (&v)[LoraOps::kMaxLoraGroup], int g) {
  return g == 0 ? v[0] : g == 1 ? v[1] : v[2];
}

// V elements of T from p as floats: one 16-byte load (V = kVec16<T>) or one element.
template <typename T, int V>
__device__ __forceinline__ void lora_load_f32(const T* p, float (&out)[V]) {
  if constexpr (V == 1) {
    out[0] = to_f32(*p);
  } else {
    load16_f32<T>(p, out);
  }
}

// A second input of a shrink block (IB_LORA_IN_GEMV=5's lookahead, lora.cu): each row's product
// of x2 (T, k) with the group's second A stacks a (S, R, k) (the same targets' order, slots and
// R) is added into the row's sum; one token a block.
template <typename T>
struct LoraShrinkSecond {
  const T* x = nullptr;
  int64_t k = 0;
  const void* a[LoraOps::kMaxLoraGroup] = {};
};

// Block (tile, row_block) of the shrink's grid (token tiles of TT, blocks of kLoraShrinkRows rows
// of the group's G x R) computes rows [row_block * kLoraShrinkRows, +kLoraShrinkRows) (target g =
// row / R, rank row r = row % R) for the tile's tokens, u[t][row] = a_g[slot(t)][r] . x[t] in fp32;
// its threads split K (few dependent loads each: a decode step's shrink is latency-bound) and the
// warps' sums meet in shared memory. Rows of a token of slot -1 (or beyond the stacks) are left
// unwritten: the expand skips it. kNorm (one token a tile): x[t] stands for rms_norm(x[t]) * gain
// (gain null: ones), the fused decode GEMVs' input: the block sums the token's squares as it
// goes and scales its sums by 1 / rms at the end. sync (null: none): the LoraSync set of the
// GEMV launched after this one (lora_kernels.h): the block lets it launch before its wait, block
// (0, 0) releases kLoraSyncX after the wait, and every block counts itself into kLoraSyncU once
// its rows of u are stored. kSecond: second's products are added to each row's sum (no norm).
template <typename T, int V, int TT, bool kNorm = false, bool kSecond = false>
__device__ __forceinline__ void lora_shrink_block(
    const T* __restrict__ x, int64_t k, const int32_t* __restrict__ slot_ids, int64_t tokens,
    const LoraGroupPtrs& group, int rank, int num_slots, float* u, unsigned tile,
    unsigned row_block, const T* __restrict__ gain = nullptr, float eps = 0.0f,
    unsigned* sync = nullptr, const LoraShrinkSecond<T>& second = {}) {
  static_assert(!kNorm || TT == 1, "the norm's shrink takes one token a block");
  static_assert(!kSecond || (TT == 1 && !kNorm), "a second input: one token a block, no norm");
  __shared__ float partial[kLoraShrinkWarps][kLoraShrinkRows * TT];
  __shared__ float ss_partial[kNorm ? kLoraShrinkWarps : 1];
  [[maybe_unused]] float ss = 0.0f;  // kNorm: this thread's share of the token's squares
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int group_rank = group.count * rank;
  const int row0 = static_cast<int>(row_block) * kLoraShrinkRows;
  const int64_t t0 = int64_t{tile} * TT;
  const int64_t slot_stride = int64_t{rank} * k;  // elements between two slots' A
  const T* a_row[kLoraShrinkRows];  // slot 0's A row of each of the block's rows; null past the end
#pragma unroll
  for (int j = 0; j < kLoraShrinkRows; ++j) {
    const int row = row0 + j;
    const int g = row / rank;
    a_row[j] = row < group_rank ? static_cast<const T*>(lora_pick(group.a, g)) + (row % rank) * k
                                : nullptr;
  }
  int slot[TT];
  const T* xr[TT];
#pragma unroll
  for (int i = 0; i < TT; ++i) {
    const int64_t t = t0 + i;
    const int s = t < tokens ? slot_ids[t] : -1;
    slot[i] = s < num_slots ? s : -1;
    xr[i] = x + (t < tokens ? t : t0) * k;
  }
  [[maybe_unused]] const T* a2_row[kLoraShrinkRows];  // kSecond: the token's slot's a rows
  if constexpr (kSecond) {
#pragma unroll
    for (int j = 0; j < kLoraShrinkRows; ++j) {
      const int row = row0 + j;
      a2_row[j] = row < group_rank && slot[0] >= 0
                      ? static_cast<const T*>(lora_pick(second.a, row / rank)) +
                            slot[0] * (int64_t{rank} * second.k) + (row % rank) * second.k
                      : nullptr;
    }
  }
  // Under programmatic dependent launch (detail/pdl.cuh) the block starts while the kernel that
  // writes x finishes: the first token's A rows (weights) go to L2 meanwhile; slot ids were
  // uploaded before the step's first kernel. x and u only after pdl_wait().
  if (slot[0] >= 0) {
    for (int64_t c = int64_t{threadIdx.x} * V; c < k; c += int64_t{kLoraShrinkThreads} * V) {
#pragma unroll
      for (int j = 0; j < kLoraShrinkRows; ++j) {
        if (a_row[j] != nullptr) prefetch_l2(a_row[j] + slot[0] * slot_stride + c);
      }
    }
    if constexpr (kSecond) {
      for (int64_t c = int64_t{threadIdx.x} * V; c < second.k;
           c += int64_t{kLoraShrinkThreads} * V) {
#pragma unroll
        for (int j = 0; j < kLoraShrinkRows; ++j) {
          if (a2_row[j] != nullptr) prefetch_l2(a2_row[j] + c);
        }
      }
    }
  }
  if (sync != nullptr) {
    pdl_trigger();
    pdl_wait();
    if (tile == 0 && row_block == 0 && threadIdx.x == 0) st_release_gpu(sync + kLoraSyncX, 1u);
  } else {
    pdl_wait();
    pdl_trigger();
  }
  float acc[kLoraShrinkRows][TT];
#pragma unroll
  for (int j = 0; j < kLoraShrinkRows; ++j) {
#pragma unroll
    for (int i = 0; i < TT; ++i) acc[j][i] = 0.0f;
  }
  // At decode (TT = 1) four chunks' loads go out together (K = 14,336 is 7 chunks at bf16).
#pragma unroll(TT == 1 ? 4 : 1)
  for (int64_t c = int64_t{threadIdx.x} * V; c < k; c += int64_t{kLoraShrinkThreads} * V) {
    float av[kLoraShrinkRows][V] = {};
    int cur = -1;  // the slot whose A elements av holds (uniform across the block)
#pragma unroll
    for (int i = 0; i < TT; ++i) {
      if (slot[i] < 0) continue;
      if (slot[i] != cur) {
        cur = slot[i];
#pragma unroll
        for (int j = 0; j < kLoraShrinkRows; ++j) {
          if (a_row[j] != nullptr) lora_load_f32<T, V>(a_row[j] + cur * slot_stride + c, av[j]);
        }
      }
      float xv[V];
      lora_load_f32<T, V>(xr[i] + c, xv);
      if constexpr (kNorm) {
        float gv[V];
        if (gain != nullptr) {
          lora_load_f32<T, V>(gain + c, gv);
        } else {
#pragma unroll
          for (int v = 0; v < V; ++v) gv[v] = 1.0f;
        }
#pragma unroll
        for (int v = 0; v < V; ++v) {
          ss += xv[v] * xv[v];
          xv[v] *= gv[v];
        }
      }
#pragma unroll
      for (int j = 0; j < kLoraShrinkRows; ++j) {
#pragma unroll
        for (int v = 0; v < V; ++v) acc[j][i] += av[j][v] * xv[v];
      }
    }
  }
  if constexpr (kSecond) {
    if (slot[0] >= 0) {
      const int64_t k2 = second.k;
      const T* x2 = second.x + t0 * k2;
#pragma unroll 4
      for (int64_t c = int64_t{threadIdx.x} * V; c < k2; c += int64_t{kLoraShrinkThreads} * V) {
        float xv[V];
        lora_load_f32<T, V>(x2 + c, xv);
#pragma unroll
        for (int j = 0; j < kLoraShrinkRows; ++j) {
          if (a2_row[j] == nullptr) continue;
          float av[V];
          lora_load_f32<T, V>(a2_row[j] + c, av);
#pragma unroll
          for (int v = 0; v < V; ++v) acc[j][0] += av[v] * xv[v];
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kLoraShrinkRows; ++j) {
#pragma unroll
    for (int i = 0; i < TT; ++i) {
      const float sum = warp_sum(acc[j][i]);
      if (lane == 0) partial[warp][j * TT + i] = sum;
    }
  }
  if constexpr (kNorm) {
    const float sum = warp_sum(ss);
    if (lane == 0) ss_partial[warp] = sum;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kLoraShrinkRows * TT; e += kLoraShrinkThreads) {
    const int j = e / TT, i = e % TT;
    const int64_t t = t0 + i;
    if (row0 + j >= group_rank || t >= tokens) continue;
    const int s = slot_ids[t];
    if (s < 0 || s >= num_slots) continue;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kLoraShrinkWarps; ++w) sum += partial[w][e];
    if constexpr (kNorm) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kLoraShrinkWarps; ++w) total += ss_partial[w];
      sum *= rsqrtf(total / static_cast<float>(k) + eps);
    }
    u[t * group_rank + row0 + j] = sum;
  }
  if (sync != nullptr) block_count_done(sync + kLoraSyncU);
}

}  // namespace ib::cuda
