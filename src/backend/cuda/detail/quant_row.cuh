// The per-token activation quantization of the W8A8 formats (backend/weight.h), in pieces that the
// quantize kernel (quant.cu) and the decode GEMV quantizing its own x (gemv_kernel.cuh's kFuseQ)
// share, so that both compute the same codes and scales bit for bit: a row of 2-byte elements is
// read in 16-byte vectors, vector i by thread i % kThreads in ascending i; each thread sums its
// squares and takes its largest magnitude (quant_vec_stats), the block reduces both
// (quant_row_scale: block_max, then block_sum), and each vector becomes 8 codes
// (quant_vec_codes). FP8 E4M3: scale = max|row| / 448 (1 for a zero row), q = e4m3(v * (448 /
// max|row|)) rounded to nearest even with saturation (the CPU's f32_to_f8e4m3_bits). INT8: scale
// = max|row| / 127, q = clamp(rne(v * (127 / max|row|)), -127, 127) (the CPU's quantize_int8).
#pragma once

#include <cuda_fp8.h>

#include <type_traits>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"

namespace ib::cuda {

inline constexpr float kQuantInt8Max = 127.0f;

template <typename TQ>
struct QuantCode;
template <>
struct QuantCode<uint8_t> {  // E4M3 bits
  static constexpr float kMax = kF8E4M3Max;
  __device__ static uint8_t of(float v) {
    return __nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3);
  }
};
template <>
struct QuantCode<int8_t> {
  static constexpr float kMax = kQuantInt8Max;
  __device__ static int8_t of(float v) {
    return static_cast<int8_t>(max(-127, min(127, __float2int_rn(v))));
  }
};

// A code with a static scale (weight.h), inv = 1 / s in fp32 (as the CPU oracle computes it):
// INT8 symmetric clamp(rne(v * inv), -127, 127), asymmetric clamp(rne(v * inv) + z, 0, 255) -
// 128; E4M3 e4m3(v * inv) saturated (symmetric only).
template <typename TQ>
__device__ __forceinline__ TQ static_code_of(float v, float inv, const StaticActQuant& f) {
  if constexpr (std::is_same_v<TQ, int8_t>) {
    const float c = rintf(v * inv);
    return static_cast<int8_t>(
        f.asymmetric ? fminf(fmaxf(c + static_cast<float>(f.zero_point), 0.0f), 255.0f) - 128.0f
                     : fminf(fmaxf(c, -kQuantInt8Max), kQuantInt8Max));
  } else {
    return QuantCode<TQ>::of(v * inv);
  }
}

// Word w (elements 2w, 2w + 1) of a 16-byte vector of T.
template <typename T>
__device__ __forceinline__ float2 quant_pair(const uint4& v, int w) {
  return unpack2_f32<T>(w == 0 ? v.x : w == 1 ? v.y : w == 2 ? v.z : v.w);
}

// Word w of x times the gain's (gv ignored without a gain).
template <typename T>
__device__ __forceinline__ float2 quant_scaled(const uint4& xv, const uint4& gv, bool gain, int w) {
  const float2 h = quant_pair<T>(xv, w);
  if (!gain) return h;
  const float2 gg = quant_pair<T>(gv, w);
  return make_float2(h.x * gg.x, h.y * gg.y);
}

// One vector's share of the row's statistics: the sum of squares of x itself (kRms) and the
// largest magnitude of x * gain.
template <typename T, bool kRms>
__device__ __forceinline__ void quant_vec_stats(const uint4& xv, const uint4& gv, bool gain,
                                                float& ss, float& amax) {
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    if constexpr (kRms) {
      const float2 h = quant_pair<T>(xv, w);
      ss += h.x * h.x + h.y * h.y;
    }
    const float2 v = quant_scaled<T>(xv, gv, gain, w);
    amax = fmaxf(amax, fmaxf(fabsf(v.x), fabsf(v.y)));
  }
}

// How a row's values become codes: code(v * mul) (dynamic) or static_code_of(v * inv_rms, mul),
// and the row's scale.
struct QuantRowScale {
  float mul, scale, inv_rms;
};

// The row's scale from every thread's statistics (a block reduction: every thread of the block
// calls it; scratch is 32 floats of shared memory).
template <typename TQ, bool kRms>
__device__ __forceinline__ QuantRowScale quant_row_scale(float amax, float ss, int64_t k, float eps,
                                                         const StaticActQuant& fixed,
                                                         float* scratch) {
  constexpr float kMax = QuantCode<TQ>::kMax;
  QuantRowScale r{0.0f, 0.0f, 1.0f};
  if (fixed.scale > 0.0f) {
    if constexpr (kRms) r.inv_rms = rsqrtf(block_sum(ss, scratch) / static_cast<float>(k) + eps);
    r.mul = 1.0f / fixed.scale;
    r.scale = fixed.scale;
  } else {
    amax = block_max(amax, scratch);
    r.mul = amax == 0.0f ? 0.0f : kMax / amax;
    r.scale = amax == 0.0f ? 1.0f : amax / kMax;
    if constexpr (kRms) r.scale *= rsqrtf(block_sum(ss, scratch) / static_cast<float>(k) + eps);
  }
  return r;
}

// A vector's 8 codes, the first in the low byte of the first word.
template <typename T, typename TQ>
__device__ __forceinline__ uint2 quant_vec_codes(const uint4& xv, const uint4& gv, bool gain,
                                                 const QuantRowScale& r,
                                                 const StaticActQuant& fixed) {
  const bool is_static = fixed.scale > 0.0f;
  uint32_t word[2] = {0u, 0u};
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float2 s2 = quant_scaled<T>(xv, gv, gain, w);
    const float v[2] = {s2.x, s2.y};
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      const TQ code = is_static ? static_code_of<TQ>(v[e] * r.inv_rms, r.mul, fixed)
                                : QuantCode<TQ>::of(v[e] * r.mul);
      const int byte = 2 * w + e;
      word[byte / 4] |= static_cast<uint32_t>(static_cast<uint8_t>(code)) << (8 * (byte % 4));
    }
  }
  return make_uint2(word[0], word[1]);
}

// A whole block quantizes one row of k values held in its shared memory (x, and gain or null:
// 16-byte aligned, k % 8 == 0) into codes (k bytes of shared memory) and returns the row's scale
// to every thread: the statistics in the order the quantize kernel keeps them when its block has
// the same threads, then the codes from x again. Ends with a block barrier, so the codes are
// visible to the whole block.
template <typename T, typename TQ, bool kRms>
__device__ __forceinline__ float quantize_row_in_block(const uint4* x, const uint4* gain, int64_t k,
                                                       float eps, const StaticActQuant& fixed,
                                                       TQ* codes, float* scratch) {
  static_assert(sizeof(T) == 2, "8 elements per 16-byte vector");
  const int nvec = static_cast<int>(k / 8);
  const bool has_gain = gain != nullptr;
  const int threads = static_cast<int>(blockDim.x);
  float amax = 0.0f, ss = 0.0f;
  for (int i = static_cast<int>(threadIdx.x); i < nvec; i += threads)
    quant_vec_stats<T, kRms>(x[i], has_gain ? gain[i] : uint4{}, has_gain, ss, amax);
  const QuantRowScale r = quant_row_scale<TQ, kRms>(amax, ss, k, eps, fixed, scratch);
  auto* out = reinterpret_cast<uint2*>(codes);
  for (int i = static_cast<int>(threadIdx.x); i < nvec; i += threads)
    out[i] = quant_vec_codes<T, TQ>(x[i], has_gain ? gain[i] : uint4{}, has_gain, r, fixed);
  __syncthreads();
  return r.scale;
}

}  // namespace ib::cuda
