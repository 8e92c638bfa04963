// The decode GEMM kernel template: out (M, N) = x (M, K) @ w (N, K)^T for small M, bound by
// streaming w once.
//
// Each block owns 16 output features (rows of w) and splits K across its warps. A warp step
// covers 64 k: lane (r = lane / 4, q = lane % 4) loads 16 contiguous elements of w rows r and
// r + 8 and of x row r (two 16-byte loads each) and feeds them to four m16n8k16 tensor-core MMAs
// with w as the A operand (16 rows) and x^T as B (8 tokens per n-tile). The k order inside an
// MMA is permuted identically for A and B, so each lane's contiguous loads map straight onto
// the fragment registers without shuffles. A warp keeps kUnroll steps of loads in flight; with
// kAdjacent those steps are consecutive in k (longer contiguous runs per row), otherwise they
// are kWarps steps apart. fp32 accumulation; the warps' partial sums are reduced through shared
// memory and the bias is added on the way out.
#pragma once

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/mma.cuh"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {

inline constexpr int kGemvRows = 16;   // output features per block
inline constexpr int kGemvStepK = 64;  // k per warp step

__device__ __forceinline__ uint32_t gemv_word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// One warp step: 16 rows x 64 k against NT n-tiles of 8 tokens.
template <typename T, int NT>
__device__ __forceinline__ void gemv_step(float (&acc)[NT][4], const uint4 (&wa)[2],
                                          const uint4 (&wb)[2], const uint4 (&xv)[NT][2]) {
#pragma unroll
  for (int c = 0; c < 2; ++c) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t a0 = gemv_word(wa[c], 2 * h), a1 = gemv_word(wb[c], 2 * h);
      const uint32_t a2 = gemv_word(wa[c], 2 * h + 1), a3 = gemv_word(wb[c], 2 * h + 1);
#pragma unroll
      for (int t = 0; t < NT; ++t)
        mma_16816<T>(acc[t], a0, a1, a2, a3, gemv_word(xv[t][c], 2 * h),
                     gemv_word(xv[t][c], 2 * h + 1));
    }
  }
}

// Weight loads of one warp step at element offset kk: w rows r and r + 8.
template <typename T>
__device__ __forceinline__ void gemv_load_w(const T* wa_ptr, const T* wb_ptr, int64_t kk,
                                            uint4 (&wa)[2], uint4 (&wb)[2]) {
  wa[0] = load_stream16(wa_ptr + kk);
  wa[1] = load_stream16(wa_ptr + kk + 8);
  wb[0] = load_stream16(wb_ptr + kk);
  wb[1] = load_stream16(wb_ptr + kk + 8);
}

// Activation loads of one warp step at element offset kk: NT token rows.
template <typename T, int NT>
__device__ __forceinline__ void gemv_load_x(const T* const (&x_ptr)[NT], int64_t kk,
                                            uint4 (&xv)[NT][2]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    xv[t][0] = __ldg(reinterpret_cast<const uint4*>(x_ptr[t] + kk));
    xv[t][1] = __ldg(reinterpret_cast<const uint4*>(x_ptr[t] + kk + 8));
  }
}

// Loads of one warp step at element offset kk: w rows r / r + 8 and NT token rows.
template <typename T, int NT>
__device__ __forceinline__ void gemv_load(const T* wa_ptr, const T* wb_ptr,
                                          const T* const (&x_ptr)[NT], int64_t kk, uint4 (&wa)[2],
                                          uint4 (&wb)[2], uint4 (&xv)[NT][2]) {
  gemv_load_w<T>(wa_ptr, wb_ptr, kk, wa, wb);
  gemv_load_x<T, NT>(x_ptr, kk, xv);
}

// x (M, K), w (N, K), bias (N) or null, out (M, N); K % 64 == 0; M <= 8 * NT.
// grid: ceil(N / 16) blocks of kWarps * 32 threads. Under programmatic dependent launch the
// interleaved variant issues its first weight loads before waiting for the previous kernel
// (weights are constant; x and out are not touched before the wait).
template <typename T, typename TOut, int NT, int kWarps, int kUnroll, bool kAdjacent>
__global__ void __launch_bounds__(kWarps * 32)
    gemv_kernel(const T* __restrict__ x, const T* __restrict__ w, const T* __restrict__ bias,
                TOut* __restrict__ out, int m, int n, int k) {
  __shared__ float partial[kWarps][NT][4][32];  // (warp, n-tile, C register, lane)
  const int warp = threadIdx.x >> 5;
  const int lane = threadIdx.x & 31;
  const int r = lane >> 2;
  const int q = lane & 3;
  const int64_t n0 = int64_t{blockIdx.x} * kGemvRows;
  // Rows and tokens past the end read row 0 / token 0: their results are never stored.
  const int64_t row_a = n0 + r < n ? n0 + r : 0;
  const int64_t row_b = n0 + r + 8 < n ? n0 + r + 8 : 0;
  const T* wa_ptr = w + row_a * k + q * 16;
  const T* wb_ptr = w + row_b * k + q * 16;
  const T* x_ptr[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const int tok = t * 8 + r;
    x_ptr[t] = x + int64_t{tok < m ? tok : 0} * k + q * 16;
  }

  float acc[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

  const int steps = k / kGemvStepK;
  int tail_begin;
  if constexpr (kAdjacent) {
    pdl_wait();
    pdl_trigger();
    const int groups = steps / kUnroll;
    for (int g = warp; g < groups; g += kWarps) {
      uint4 wa[kUnroll][2], wb[kUnroll][2], xv[kUnroll][NT][2];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        gemv_load<T, NT>(wa_ptr, wb_ptr, x_ptr, int64_t{g * kUnroll + u} * kGemvStepK, wa[u], wb[u],
                         xv[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) gemv_step<T, NT>(acc, wa[u], wb[u], xv[u]);
    }
    tail_begin = groups * kUnroll + warp;
  } else {
    // The weights of this warp's first group go out before the wait; each group's loads of the
    // next group's weights go out right after its MMAs.
    int s = warp;
    uint4 wa[kUnroll][2], wb[kUnroll][2];
    const auto full = [&](int first) { return first + (kUnroll - 1) * kWarps < steps; };
    if (full(s)) {
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        gemv_load_w<T>(wa_ptr, wb_ptr, int64_t{s + u * kWarps} * kGemvStepK, wa[u], wb[u]);
    }
    pdl_wait();
    pdl_trigger();
    for (; full(s); s += kUnroll * kWarps) {
      uint4 xv[kUnroll][NT][2];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
        gemv_load_x<T, NT>(x_ptr, int64_t{s + u * kWarps} * kGemvStepK, xv[u]);
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) gemv_step<T, NT>(acc, wa[u], wb[u], xv[u]);
      const int next = s + kUnroll * kWarps;
      if (full(next)) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u)
          gemv_load_w<T>(wa_ptr, wb_ptr, int64_t{next + u * kWarps} * kGemvStepK, wa[u], wb[u]);
      }
    }
    tail_begin = s;
  }
  for (int s = tail_begin; s < steps; s += kWarps) {
    uint4 wa[2], wb[2], xv[NT][2];
    gemv_load<T, NT>(wa_ptr, wb_ptr, x_ptr, int64_t{s} * kGemvStepK, wa, wb, xv);
    gemv_step<T, NT>(acc, wa, wb, xv);
  }

#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][t][i][lane] = acc[t][i];
  __syncthreads();

  // Output o = token * 16 + row: consecutive threads write consecutive features of one token.
  for (int o = threadIdx.x; o < NT * 8 * kGemvRows; o += kWarps * 32) {
    const int token = o / kGemvRows;
    const int row = o % kGemvRows;
    const int64_t feature = n0 + row;
    if (token >= m || feature >= n) continue;
    const int t = token / 8;
    const int col = token % 8;
    const int src_lane = (row % 8) * 4 + col / 2;
    const int reg = (row / 8) * 2 + col % 2;
    float sum = 0.0f;
#pragma unroll
    for (int wi = 0; wi < kWarps; ++wi) sum += partial[wi][t][reg][src_lane];
    if (bias) sum += to_f32(bias[feature]);
    out[int64_t{token} * n + feature] = from_f32<TOut>(sum);
  }
}

}  // namespace ib::cuda
