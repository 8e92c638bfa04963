// RMSNorm of one row held in a block's shared memory (the decode GEMVs' IB_GEMV_STAGE_NORM), in
// norm.cu's arithmetic and order: the row's sum of squares as rms_norm_kernel's (and its register
// form's) 256 threads keep it, each over the 16-byte vectors thread, thread + 256, ..., the
// elements of a vector in order, then its block_sum (the warps' butterfly sums, then the sum of
// those 8); then x * inv_rms * gain rounded to T. A block of fewer threads (any of 32, 64, 128 or
// 256) stands in for the 256: thread t sums for t, t + blockDim.x, ... So the row equals the norm
// kernel's output bit for bit.
#pragma once

#include "backend/cuda/detail/device_math.cuh"

namespace ib::cuda {

// Normalises x (k values of T, 16-byte aligned, k % 8 == 0) in place: x * rsqrt(mean(x^2) + eps)
// * gain. scratch: 32 floats of shared memory. Starts and ends with a block barrier.
template <typename T>
__device__ __forceinline__ void rms_norm_row_in_block(uint4* x, const uint4* gain, int64_t k,
                                                      float eps, float* scratch) {
  static_assert(sizeof(T) == 2, "8 elements per 16-byte vector");
  constexpr int kNormThreads = 256;  // norm.cu's block
  constexpr int kV = kVec16<T>;
  const int nvec = static_cast<int>(k / kV);
  const int threads = static_cast<int>(blockDim.x);
  const int lane = static_cast<int>(threadIdx.x) & 31;
  __syncthreads();  // scratch may still be read, x still be written
  for (int t = static_cast<int>(threadIdx.x); t < kNormThreads; t += threads) {
    float sum_sq = 0.0f;
    for (int i = t; i < nvec; i += kNormThreads) {
      float v[kV];
      load16_f32(reinterpret_cast<const T*>(x + i), v);
#pragma unroll
      for (int j = 0; j < kV; ++j) sum_sq += v[j] * v[j];
    }
    sum_sq = warp_sum(sum_sq);
    if (lane == 0) scratch[t >> 5] = sum_sq;
  }
  __syncthreads();
  const float total = warp_sum(lane < kNormThreads / 32 ? scratch[lane] : 0.0f);
  const float inv_rms = rsqrtf(total / static_cast<float>(k) + eps);
  for (int i = static_cast<int>(threadIdx.x); i < nvec; i += threads) {
    float v[kV], w[kV];
    load16_f32(reinterpret_cast<const T*>(x + i), v);
    load16_f32(reinterpret_cast<const T*>(gain + i), w);
#pragma unroll
    for (int j = 0; j < kV; ++j) v[j] = v[j] * inv_rms * w[j];
    store16_f32(reinterpret_cast<T*>(x + i), v);
  }
  __syncthreads();
}

}  // namespace ib::cuda
