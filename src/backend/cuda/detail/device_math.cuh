// Device-side helpers shared by the kernels: element conversions, 16-byte vector access, warp and
// block reductions, and the dispatch from a runtime DType to a kernel template.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "core/assert.h"
#include "core/dtype.h"

namespace ib::cuda {

using bf16 = __nv_bfloat16;
using f16 = __half;

__device__ __forceinline__ float to_f32(float x) {
  return x;
}
__device__ __forceinline__ float to_f32(bf16 x) {
  return __bfloat162float(x);
}
__device__ __forceinline__ float to_f32(f16 x) {
  return __half2float(x);
}

template <typename T>
__device__ __forceinline__ T from_f32(float x);
template <>
__device__ __forceinline__ float from_f32<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16 from_f32<bf16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ f16 from_f32<f16>(float x) {
  return __float2half_rn(x);
}

// SwiGLU's activation, silu(g) = g / (1 + e^-g), in fp32 (every kernel that computes it).
__device__ __forceinline__ float silu(float g) {
  return g / (1.0f + expf(-g));
}

// A KV-cache element (backend/ops.h, KvCacheLayer): the activation type itself, or E4M3 bytes
// (uint8_t) holding e4m3(x / scale), rounded to nearest even and saturated to +-448 as
// f32_to_f8e4m3_bits does; read back without the scale, which the kernels fold in.
template <typename TC, typename T>
__device__ __forceinline__ TC to_kv_cache(T x, float scale) {
  if constexpr (std::is_same_v<TC, uint8_t>) {
    return __nv_cvt_float_to_fp8(to_f32(x) / scale, __NV_SATFINITE, __NV_E4M3);
  } else {
    static_assert(std::is_same_v<TC, T>, "a KV cache holds act or E4M3");
    return x;
  }
}
__device__ __forceinline__ float kv_to_f32(uint8_t x) {
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(x, __NV_E4M3)));
}
template <typename T>
__device__ __forceinline__ float kv_to_f32(T x) {
  return to_f32(x);
}

// The two elements of T packed in one 32-bit word (element 0 in the low half), as floats.
template <typename T>
__device__ __forceinline__ float2 unpack2_f32(uint32_t word);
template <>
__device__ __forceinline__ float2 unpack2_f32<bf16>(uint32_t word) {
  return make_float2(__uint_as_float(word << 16), __uint_as_float(word & 0xffff0000u));
}
template <>
__device__ __forceinline__ float2 unpack2_f32<f16>(uint32_t word) {
  __half2 h;
  memcpy(&h, &word, sizeof(h));
  return __half22float2(h);
}

// Two floats rounded to T and packed in one word (a in the low half): cvt.rn.{bf16,f16}x2.f32.
template <typename T>
__device__ __forceinline__ uint32_t pack2_from_f32(float a, float b);
template <>
__device__ __forceinline__ uint32_t pack2_from_f32<bf16>(float a, float b) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
  uint32_t word;
  memcpy(&word, &v, sizeof(word));
  return word;
}
template <>
__device__ __forceinline__ uint32_t pack2_from_f32<f16>(float a, float b) {
  const __half2 v = __floats2half2_rn(a, b);
  uint32_t word;
  memcpy(&word, &v, sizeof(word));
  return word;
}

// Integer codes as floats without an I2F (integer-to-float conversions run at 16 a clock an SM on
// sm_90, the programming guide's throughput table, against 128 FFMA); tools/check_conversions.py
// checks both exhaustively.
// Byte `byte` (0-3) of a word of int8 codes: PRMT puts b + 128 (b ^ 0x80) in the low byte of the
// float 2^23, and subtracting 2^23 + 128 leaves b exactly (the XOR of a word used for all four
// bytes is one instruction after inlining).
__device__ __forceinline__ float int8_byte_as_float(uint32_t word, int byte) {
  return __uint_as_float(__byte_perm(word ^ 0x80808080u, 0x4B000000u, 0x7540u | byte)) - 8388736.0f;
}
// (q - z) * s of a 4-bit code q (0-15, at bits 16-19 of q16, the rest zero) with offset =
// -(128 + z) * s: 128 + q is the float whose mantissa holds q at bit 16, and both products fit
// fp32's 24 bits (8 x 11 for an f16 scale), so the FMA's one rounding is of an exact (q - z) * s.
__device__ __forceinline__ float int4_code_value(uint32_t q16, float scale, float offset) {
  return fmaf(__uint_as_float(0x43000000u | q16), scale, offset);
}

// Elements of T in one 16-byte vector.
template <typename T>
inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

// 16 bytes of T as an array of floats (load) and back (store). p must be 16-byte aligned.
template <typename T>
__device__ __forceinline__ void load16_f32(const T* p, float (&out)[kVec16<T>]) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec16<T>; ++i) out[i] = to_f32(e[i]);
}
template <typename T>
__device__ __forceinline__ void store16_f32(T* p, const float (&in)[kVec16<T>]) {
  uint4 raw;
  T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
  for (int i = 0; i < kVec16<T>; ++i) e[i] = from_f32<T>(in[i]);
  *reinterpret_cast<uint4*>(p) = raw;
}

// A streaming 16-byte load that bypasses L1 (weights are read once per step).
__device__ __forceinline__ uint4 load_stream16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

// A hint that the 128-byte line holding p will be read soon: it is fetched into L2 without
// holding a register or waiting.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024). scratch: 32 floats of shared
// memory. Every thread gets the result; the function synchronizes the block.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : 0.0f;
  return warp_sum(v);
}

// Maximum over the block, as block_sum.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

__host__ __device__ __forceinline__ bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

}  // namespace ib::cuda

// Runs BODY with the C++ element type named T bound to dtype (f32, bf16 or f16).
#define IB_DISPATCH_FLOAT(dtype, T, ...)                                  \
  do {                                                                    \
    switch (dtype) {                                                      \
      case ::ib::DType::kF32: {                                           \
        using T = float;                                                  \
        __VA_ARGS__;                                                      \
        break;                                                            \
      }                                                                   \
      case ::ib::DType::kBF16: {                                          \
        using T = ::ib::cuda::bf16;                                       \
        __VA_ARGS__;                                                      \
        break;                                                            \
      }                                                                   \
      case ::ib::DType::kF16: {                                           \
        using T = ::ib::cuda::f16;                                        \
        __VA_ARGS__;                                                      \
        break;                                                            \
      }                                                                   \
      default:                                                            \
        IB_ASSERT(false, "a float tensor (f32, bf16, f16) was expected"); \
    }                                                                     \
  } while (0)
