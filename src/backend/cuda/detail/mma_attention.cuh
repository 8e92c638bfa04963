// The warp-level pieces of the tensor-core attention kernels (attention_flash.cu's prefill and
// attention_decode_mma.cu's decode): the scores of 16 keys, the online softmax over a warp's score
// tiles, and O += P V for 16 keys, on m16n8k16 MMAs. A lane holds the warp's rows lane / 4 and
// lane / 4 + 8, and of each 8-key (or 8-column) tile the keys (lane % 4) * 2 and + 1.
#pragma once

#include <cuda_fp8.h>

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/mma.cuh"

namespace ib::cuda {

// Shared-memory rows of head_dim HD 16-bit elements: 16 bytes of padding a row, so the 8 rows an
// ldmatrix reads land in distinct banks.
template <int HD>
constexpr int attention_pitch() {
  return HD + 8;
}
// Q's rows, then K and V in two stages of key_rows rows each.
template <int HD>
constexpr size_t attention_smem_bytes(int q_rows, int key_rows) {
  return static_cast<size_t>(q_rows + 4 * key_rows) * attention_pitch<HD>() * 2;
}

// The kernels' dynamic shared memory carved up: Q (q_rows), then K and V (two stages of key_rows
// rows each), rows of attention_pitch<HD>() elements.
template <typename T>
struct AttentionTiles {
  T* q;
  T* k;
  T* v;
};
template <typename T, int HD>
__device__ __forceinline__ AttentionTiles<T> attention_tiles(void* smem, int q_rows, int key_rows) {
  constexpr int kP = attention_pitch<HD>();
  T* q = static_cast<T*>(smem);
  T* k = q + q_rows * kP;
  return {q, k, k + 2 * key_rows * kP};
}

// rows x HD elements from global memory (row r at src + r * stride; rows from valid_rows on are
// zero-filled) into shared-memory rows of pitch kP, 16 bytes a cp.async, by the block's kThreads
// threads (committed with the caller's next group).
template <typename T, int HD, int kThreads>
__device__ __forceinline__ void cp_async_rows(T* dst, int kP, int rows, const T* src,
                                              int64_t stride, int valid_rows) {
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  for (int i = static_cast<int>(threadIdx.x); i < rows * kChunks; i += kThreads) {
    const int r = i / kChunks;
    const int c = (i % kChunks) * 8;
    const bool valid = r < valid_rows;
    cp_async16(dst + r * kP + c, src + (valid ? r * stride : 0) + c, valid);
  }
}

// Calls f(r, c) for this thread's share of kRows rows x kChunks chunks, the block's kThreads
// threads taking consecutive chunks: a compile-time count of steps, unsigned index arithmetic
// (constant divisors).
template <int kRows, int kChunks, int kThreads, typename F>
__device__ __forceinline__ void for_tile_chunks(const F& f) {
  static_assert(kRows * kChunks % kThreads == 0, "a whole number of chunks a thread");
#pragma unroll
  for (int j = 0; j < kRows * kChunks / kThreads; ++j) {
    const unsigned i = threadIdx.x + static_cast<unsigned>(j * kThreads);
    f(static_cast<int>(i / kChunks), static_cast<int>(i % kChunks));
  }
}

// A K tile and a V tile of kKeyRows rows into shared memory (rows of pitch kP), 16 bytes a
// cp.async, by the block's kThreads threads: row r from k_src / v_src + row_of(r) (an element
// offset), or zero-filled where row_of(r) < 0 (keys past the visible ones).
template <typename T, int HD, int kThreads, int kKeyRows, typename RowOf>
__device__ __forceinline__ void cp_async_kv(T* kd, T* vd, int kP, const T* k_src, const T* v_src,
                                            const RowOf& row_of) {
  for_tile_chunks<kKeyRows, HD / 8, kThreads>([&](int r, int chunk) {
    const int c = chunk * 8;
    const int64_t row = row_of(r);
    const bool valid = row >= 0;
    cp_async16(kd + r * kP + c, k_src + (valid ? row : 0) + c, valid);
    cp_async16(vd + r * kP + c, v_src + (valid ? row : 0) + c, valid);
  });
}

// A step of a two-stage cp.async ring: the next tile's loads issued (load_next, when has_next)
// and committed, then the current tile's waited for; ends on a block barrier.
template <typename LoadNext>
__device__ __forceinline__ void ring2_wait(bool has_next, const LoadNext& load_next) {
  if (has_next) {
    load_next();
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

// Eight E4M3 values (raw's bytes, the first in the low byte) as eight T in one 16-byte word:
// e4m3 -> f16 by the hardware's paired conversion, exact, and for bf16 through f32, exact too
// (E4M3's 4 significant bits and exponents fit both).
template <typename T>
__device__ __forceinline__ uint4 e4m3x8_to(uint2 raw) {
  uint32_t out[4];
  const uint32_t words[2] = {raw.x, raw.y};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const auto pair = static_cast<__nv_fp8x2_storage_t>(words[i / 2] >> (16 * (i % 2)));
    const __half2 h = __half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3));
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      const float2 f = __half22float2(h);
      out[i] = pack2<T>(f.x, f.y);
    } else {
      out[i] = *reinterpret_cast<const uint32_t*>(&h);
    }
  }
  return {out[0], out[1], out[2], out[3]};
}

// Eight T (a 16-byte word) as eight fp16, through f32, clamped to fp16's finite range: a value past
// 65,504 becomes the largest fp16, not infinity.
template <typename T>
__device__ __forceinline__ uint4 convert8_to_f16(uint4 in) {
  constexpr float kMax = 65504.0f;
  uint32_t words[4] = {in.x, in.y, in.z, in.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const T* pair = reinterpret_cast<const T*>(&words[i]);
    const float lo = fminf(fmaxf(to_f32(pair[0]), -kMax), kMax);
    const float hi = fminf(fmaxf(to_f32(pair[1]), -kMax), kMax);
    words[i] = pack2<__half>(lo, hi);
  }
  return {words[0], words[1], words[2], words[3]};
}

// s0 (keys 0-7) and s1 (keys 8-15) += Q . K over 16 dims: a is Q's A fragment of those dims, kt
// the 16 keys' rows in shared memory (row pitch kP elements) at the dims' first column.
template <typename T>
__device__ __forceinline__ void mma_scores16(const uint32_t (&a)[4], const T* kt, int kP, int lane,
                                             float (&s0)[4], float (&s1)[4]) {
  uint32_t b[4];
  ldmatrix_x4(b, kt + ((lane & 7) + ((lane >> 4) << 3)) * kP + ((lane >> 3) & 1) * 8);
  mma_16816<T>(s0, a[0], a[1], a[2], a[3], b[0], b[1]);
  mma_16816<T>(s1, a[0], a[1], a[2], a[3], b[2], b[3]);
}

// One step of the online softmax over NT 8-key score tiles s (log2 units, masked keys -inf): each
// row's running max m and this lane's part of its sum l (the 4 lanes of a row add theirs up at
// the end), the ND output tiles o rescaled, s turned into the probabilities.
template <int NT, int ND>
__device__ __forceinline__ void mma_softmax_step(float (&s)[NT][4], float (&m)[2], float (&l)[2],
                                                 float (&o)[ND][4]) {
#pragma unroll
  for (int ri = 0; ri < 2; ++ri) {
    float mx = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][ri * 2], s[nt][ri * 2 + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m[ri], mx);
    const float ref = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = exp2f(m[ri] - ref);
    float sum = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float pv = exp2f(s[nt][ri * 2 + e] - ref);
        s[nt][ri * 2 + e] = pv;
        sum += pv;
      }
    }
    l[ri] = l[ri] * alpha + sum;
    m[ri] = m_new;
#pragma unroll
    for (int dt = 0; dt < ND; ++dt) {
      o[dt][ri * 2] *= alpha;
      o[dt][ri * 2 + 1] *= alpha;
    }
  }
}

// A row's softmax sum from the parts its 4 lanes hold (mma_softmax_step's l).
__device__ __forceinline__ float mma_row_sum(float part) {
  part += __shfl_xor_sync(0xffffffffu, part, 1);
  return part + __shfl_xor_sync(0xffffffffu, part, 2);
}

// O (ND 8-column tiles) += P V over 16 keys: P from the probability tiles s0 (keys 0-7) and s1
// (keys 8-15), whose accumulator layout is the A operand's; vt the keys' V rows in shared memory
// (row pitch kP elements).
template <typename T, int ND>
__device__ __forceinline__ void mma_pv16(const float (&s0)[4], const float (&s1)[4], const T* vt,
                                         int kP, int lane, float (&o)[ND][4]) {
  const uint32_t a0 = pack2<T>(s0[0], s0[1]);
  const uint32_t a1 = pack2<T>(s0[2], s0[3]);
  const uint32_t a2 = pack2<T>(s1[0], s1[1]);
  const uint32_t a3 = pack2<T>(s1[2], s1[3]);
#pragma unroll
  for (int dp = 0; dp < ND / 2; ++dp) {
    uint32_t b[4];
    ldmatrix_x4_trans(b,
                      vt + ((lane & 7) + ((lane >> 3) & 1) * 8) * kP + dp * 16 + (lane >> 4) * 8);
    mma_16816<T>(o[2 * dp], a0, a1, a2, a3, b[0], b[1]);
    mma_16816<T>(o[2 * dp + 1], a0, a1, a2, a3, b[2], b[3]);
  }
}

}  // namespace ib::cuda
