// The W4A16 step of the decode GEMV (gemv_kernel.cuh, kW = kGemvInt4; backend/weight.h's
// kInt4W4A16): a warp step covers 128 k, so a lane's one 16-byte load per row holds its 32 codes
// (k = q * 32 .. q * 32 + 31 of the step), the same bytes per load as the 8-bit formats. (Two
// adjacent steps per load group, 128 contiguous bytes per row, measured no faster: bench/NOTES.md,
// W4A16 run3.)
//
// Each 32-bit word of codes (8 consecutive k, k = 2j in the low nibble of byte j) becomes four
// pairs (k_i, k_i+4), i = 0..3, of (q - z) in x's 16-bit type, exactly: (word >> 4i) & 0x000F000F
// puts nibbles i and i + 4 into the low mantissa bits of the two halves of 128.0 (bf16 0x4300) or
// 1024.0 (f16 0x6400), whose ulp is 1, and one packed subtraction of 128 + z (1024 + z) leaves
// q - z. x's eight values of the same k are paired alike with two byte permutes per pair of
// pairs, so a lane's k order is the same for the weights and x, which is all the MMA needs.
// A step lies inside one group (group sizes are multiples of 128), so its MMAs sum into a
// temporary and the group's scale (f16, exact in fp32) multiplies the sum once per step.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/mma.cuh"
#include "backend/weight.h"

namespace ib::cuda {

inline constexpr int kGemvInt4StepK = 128;  // k per 4-bit warp step (64 bytes per row)

// The 16-bit pattern of 128.0 (bf16) or 1024.0 (f16), whose ulp is 1.
template <typename T>
__device__ __forceinline__ uint32_t int4_magic() {
  return std::is_same_v<T, __nv_bfloat16> ? 0x4300u : 0x6400u;
}

// Both halves of magic + z: what a code's magic value minus z's leaves q - z.
template <typename T>
__device__ __forceinline__ uint32_t int4_zero_pair(uint32_t z) {
  const uint32_t h = int4_magic<T>() | z;
  return h | (h << 16);
}

__device__ __forceinline__ uint32_t sub2_bits_bf16(uint32_t a, uint32_t b) {
  const __nv_bfloat162 r = __hsub2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                   *reinterpret_cast<const __nv_bfloat162*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

__device__ __forceinline__ uint32_t sub2_bits_f16(uint32_t a, uint32_t b) {
  const __half2 r =
      __hsub2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
  return *reinterpret_cast<const uint32_t*>(&r);
}

// One word of 8 codes as the pairs (k_i - z, k_i+4 - z), i = 0..3.
template <typename T>
__device__ __forceinline__ void int4_pairs(uint32_t word, uint32_t zero_pair, uint32_t (&p)[4]) {
  const uint32_t magic = int4_magic<T>() | (int4_magic<T>() << 16);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t v = ((word >> (4 * i)) & 0x000F000Fu) | magic;
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
      p[i] = sub2_bits_bf16(v, zero_pair);
    } else {
      p[i] = sub2_bits_f16(v, zero_pair);
    }
  }
}

// Eight x values (one 16-byte load, x_0..x_7) as the pairs (x_i, x_i+4), i = 0..3.
__device__ __forceinline__ void int4_x_pairs(const uint4& x, uint32_t (&p)[4]) {
  p[0] = __byte_perm(x.x, x.z, 0x5410);
  p[1] = __byte_perm(x.x, x.z, 0x7632);
  p[2] = __byte_perm(x.y, x.w, 0x5410);
  p[3] = __byte_perm(x.y, x.w, 0x7632);
}

// The lane's 32 x of each n-tile's token at element offset kk (four 16-byte loads).
template <typename T, int NT>
__device__ __forceinline__ void gemv_load_x_int4(const T* const (&x_ptr)[NT], int64_t kk,
                                                 uint4 (&xv)[NT][4]) {
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i)
      xv[t][i] = __ldg(reinterpret_cast<const uint4*>(x_ptr[t] + kk + 8 * i));
}

// A 4-bit step's group parameters for rows r (a) and r + 8 (b).
struct Int4Group {
  float scale_a, scale_b;
  uint32_t zero_a, zero_b;  // int4_zero_pair
};

// One 4-bit warp step: 16 rows x 128 k against NT n-tiles; acc += scale * sum (q - z) x.
template <typename T, int NT>
__device__ __forceinline__ void gemv_step_int4(float (&acc)[NT][4], const uint4& wa,
                                               const uint4& wb, const uint4 (&xv)[NT][4],
                                               const Int4Group& g) {
  float part[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t) part[t][0] = part[t][1] = part[t][2] = part[t][3] = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t word_a = j == 0 ? wa.x : j == 1 ? wa.y : j == 2 ? wa.z : wa.w;
    const uint32_t word_b = j == 0 ? wb.x : j == 1 ? wb.y : j == 2 ? wb.z : wb.w;
    uint32_t pa[4], pb[4];
    int4_pairs<T>(word_a, g.zero_a, pa);
    int4_pairs<T>(word_b, g.zero_b, pb);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      uint32_t px[4];
      int4_x_pairs(xv[t][j], px);
      mma_16816<T>(part[t], pa[0], pb[0], pa[1], pb[1], px[0], px[1]);
      mma_16816<T>(part[t], pa[2], pb[2], pa[3], pb[3], px[2], px[3]);
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {  // C rows: registers 0, 1 row r; 2, 3 row r + 8
    acc[t][0] += part[t][0] * g.scale_a;
    acc[t][1] += part[t][1] * g.scale_a;
    acc[t][2] += part[t][2] * g.scale_b;
    acc[t][3] += part[t][3] * g.scale_b;
  }
}

// The group parameters of 4-bit step s for weight rows row_a / row_b: scales (N, groups) f16
// bits, zeros (N, groups) u8, steps_per_group = group_size / 128.
template <typename T>
__device__ __forceinline__ Int4Group load_int4_group(const uint16_t* scales, const uint8_t* zeros,
                                                     int groups, int steps_per_group, int64_t row_a,
                                                     int64_t row_b, int s) {
  const int g = s / steps_per_group;
  Int4Group p;
  p.scale_a = __half2float(__ushort_as_half(__ldg(scales + row_a * groups + g)));
  p.scale_b = __half2float(__ushort_as_half(__ldg(scales + row_b * groups + g)));
  p.zero_a = int4_zero_pair<T>(__ldg(zeros + row_a * groups + g));
  p.zero_b = int4_zero_pair<T>(__ldg(zeros + row_b * groups + g));
  return p;
}

// ---- NF4 (kGemvNf4; backend/weight.h's kNf4): the same loads and steps as W4A16. A byte's two
// codes (the even k in the high nibble) become the pair (level[hi], level[lo]) * absmax in fp32,
// rounded to x's type (the lane's 32 codes lie in one 64-block), and meet x's words as they are.

// bitsandbytes' NF4 levels (backend/weight.h), in constant memory for the kernels.
static __constant__ float kNf4LevelsDevice[16] = {
    kNf4Levels[0],  kNf4Levels[1],  kNf4Levels[2],  kNf4Levels[3], kNf4Levels[4],  kNf4Levels[5],
    kNf4Levels[6],  kNf4Levels[7],  kNf4Levels[8],  kNf4Levels[9], kNf4Levels[10], kNf4Levels[11],
    kNf4Levels[12], kNf4Levels[13], kNf4Levels[14], kNf4Levels[15]};

// The absmax of 64-block b for rows row_a / row_b (as Int4Group's scales; zeros unused).
__device__ __forceinline__ Int4Group load_nf4_absmax(const float* absmax, int blocks, int64_t row_a,
                                                     int64_t row_b, int b) {
  Int4Group p;
  p.scale_a = __ldg(absmax + row_a * blocks + b);
  p.scale_b = __ldg(absmax + row_b * blocks + b);
  p.zero_a = p.zero_b = 0;
  return p;
}

// One NF4 step: 16 rows x 128 k against NT n-tiles; acc += sum w x.
template <typename T, int NT>
__device__ __forceinline__ void gemv_step_nf4(float (&acc)[NT][4], const uint4& wa, const uint4& wb,
                                              const uint4 (&xv)[NT][4], const Int4Group& g,
                                              const float2* lut) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t word_a = j == 0 ? wa.x : j == 1 ? wa.y : j == 2 ? wa.z : wa.w;
    const uint32_t word_b = j == 0 ? wb.x : j == 1 ? wb.y : j == 2 ? wb.z : wb.w;
    uint32_t pa[4], pb[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // byte i: k = 2i (high nibble), 2i + 1
      const float2 la = lut[(word_a >> (8 * i)) & 0xFFu];
      const float2 lb = lut[(word_b >> (8 * i)) & 0xFFu];
      pa[i] = pack2_from_f32<T>(la.x * g.scale_a, la.y * g.scale_a);
      pb[i] = pack2_from_f32<T>(lb.x * g.scale_b, lb.y * g.scale_b);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const uint4& x = xv[t][j];
      mma_16816<T>(acc[t], pa[0], pb[0], pa[1], pb[1], x.x, x.y);
      mma_16816<T>(acc[t], pa[2], pb[2], pa[3], pb[3], x.z, x.w);
    }
  }
}

}  // namespace ib::cuda
