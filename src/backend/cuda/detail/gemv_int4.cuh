// The W4A16 step of the decode GEMV (gemv_kernel.cuh, kW = kGemvInt4; backend/weight.h's
// kInt4W4A16): a warp step covers 128 k, so a lane's one 16-byte load per row holds its 32 codes
// (k = q * 32 .. q * 32 + 31 of the step), the same bytes per load as the 8-bit formats. (Two
// adjacent steps per load group, 128 contiguous bytes per row, measured no faster: bench/NOTES.md,
// W4A16 run3.)
//
// Each 32-bit word of codes (8 consecutive k, k = 2j in the low nibble of byte j) becomes four
// pairs (k_i, k_i+4), i = 0..3, of magic + q in x's 16-bit type, exactly: (word >> 4i) &
// 0x000F000F puts nibbles i and i + 4 into the low mantissa bits of the two halves of 128.0 (bf16
// 0x4300) or 1024.0 (f16 0x6400), whose ulp is 1. x's eight values of the same k are paired
// alike with two byte permutes per pair of pairs, so a lane's k order is the same for the weights
// and x, which is all the MMA needs. The zero point never meets a code: the step's MMAs sum
// (magic + q) x, two more MMAs per 32 k with a ones matrix sum x over the same k, and
// (magic + z) times that sum comes off once per step, where the group's scale (f16, exact in
// fp32) multiplies the difference (a step lies inside one group: group sizes are multiples of
// 128). (Subtracting magic + z from every pair instead cost a packed subtraction per pair:
// bench/NOTES.md, W4A16 run7.)
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/mma.cuh"
#include "backend/cuda/detail/nf4_levels.cuh"
#include "backend/weight.h"

namespace ib::cuda {

inline constexpr int kGemvInt4StepK = 128;  // k per 4-bit warp step (64 bytes per row)

// The value of the magic 16-bit pattern (128.0 in bf16, 0x4300, or 1024.0 in f16, 0x6400, whose
// ulp is 1): a code q in its low mantissa bits becomes the exact value magic + q.
template <typename T>
__device__ __forceinline__ float int4_magic_value() {
  return std::is_same_v<T, __nv_bfloat16> ? 128.0f : 1024.0f;
}

// (a & 0x000F000F) | magic in one LOP3: written plainly, the compiler emits an AND and an OR (a
// LOP3 takes one immediate operand), and the W4A16 GEMV is bound by that pipe (bench/NOTES.md,
// "Where the W4A16 GEMV's time goes").
template <uint32_t kMagic>
__device__ __forceinline__ uint32_t int4_low_nibbles_or(uint32_t a) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(0x000F000Fu), "n"(kMagic));
  return d;
}

// One word of 8 codes as the pairs (magic + q of k_i, magic + q of k_i+4), i = 0..3: one shift
// and one LOP3 each, no arithmetic (the zero point comes off after the MMAs).
template <typename T>
__device__ __forceinline__ void int4_pairs(uint32_t word, uint32_t (&p)[4]) {
  constexpr uint32_t kMagic = std::is_same_v<T, __nv_bfloat16> ? 0x43004300u : 0x64006400u;
  p[0] = int4_low_nibbles_or<kMagic>(word);
#pragma unroll
  for (int i = 1; i < 4; ++i) p[i] = int4_low_nibbles_or<kMagic>(word >> (4 * i));
}

// Eight x values (one 16-byte load, x_0..x_7) as the pairs (x_i, x_i+4), i = 0..3.
__device__ __forceinline__ void int4_x_pairs(const uint4& x, uint32_t (&p)[4]) {
  p[0] = __byte_perm(x.x, x.z, 0x5410);
  p[1] = __byte_perm(x.x, x.z, 0x7632);
  p[2] = __byte_perm(x.y, x.w, 0x5410);
  p[3] = __byte_perm(x.y, x.w, 0x7632);
}

// 16 bytes of x at p: from global memory through the read-only path, or (kShared: the decode
// GEMV's kXShared) from a generic address in the block's shared memory.
template <bool kShared, typename T>
__device__ __forceinline__ uint4 load_x16(const T* p) {
  if constexpr (kShared) {
    return *reinterpret_cast<const uint4*>(p);
  } else {
    return __ldg(reinterpret_cast<const uint4*>(p));
  }
}

// The lane's 32 x of each n-tile's token at element offset kk (four 16-byte loads; kShared as
// load_x16).
template <typename T, int NT, bool kShared = false>
__device__ __forceinline__ void gemv_load_x_int4(const T* const (&x_ptr)[NT], int64_t kk,
                                                 uint4 (&xv)[NT][4]) {
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) xv[t][i] = load_x16<kShared>(x_ptr[t] + kk + 8 * i);
}

// A 4-bit step's group parameters for rows r (a) and r + 8 (b) as loaded: W4A16 the f16 scale
// bits and the u8 zero points, NF4 the f32 absmax bits (zeros unused). The step converts them
// where it uses them: converted at the load (kRing steps earlier), the conversion waited there for
// the load, a DRAM round trip per step (bench/NOTES.md, "The group parameters' conversion").
struct Int4Group {
  uint32_t scale_a, scale_b;
  uint32_t zero_a, zero_b;
};

// One 4-bit warp step: 16 rows x 128 k against NT n-tiles; acc += scale * sum (q - z) x.
// The MMAs sum (magic + q) x, exactly representable products, and MMAs of a ones matrix sum x
// over the same k (the same for every row); (magic + z) times the latter comes off once per step.
template <typename T, int NT>
__device__ __forceinline__ void gemv_step_int4(float (&acc)[NT][4], const uint4& wa,
                                               const uint4& wb, const uint4 (&xv)[NT][4],
                                               const Int4Group& g) {
  const uint32_t one = std::is_same_v<T, __nv_bfloat16> ? 0x3F803F80u : 0x3C003C00u;
  float part[NT][4], xsum[NT][4];
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int i = 0; i < 4; ++i) part[t][i] = xsum[t][i] = 0.0f;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t word_a = j == 0 ? wa.x : j == 1 ? wa.y : j == 2 ? wa.z : wa.w;
    const uint32_t word_b = j == 0 ? wb.x : j == 1 ? wb.y : j == 2 ? wb.z : wb.w;
    uint32_t pa[4], pb[4];
    int4_pairs<T>(word_a, pa);
    int4_pairs<T>(word_b, pb);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      uint32_t px[4];
      int4_x_pairs(xv[t][j], px);
      mma_16816<T>(part[t], pa[0], pb[0], pa[1], pb[1], px[0], px[1]);
      mma_16816<T>(part[t], pa[2], pb[2], pa[3], pb[3], px[2], px[3]);
      mma_16816<T>(xsum[t], one, one, one, one, px[0], px[1]);
      mma_16816<T>(xsum[t], one, one, one, one, px[2], px[3]);
    }
  }
  // The group's f16 scales (exact in fp32) and magic + zero points.
  const auto scale_of = [](uint32_t bits) {
    return __half2float(__ushort_as_half(static_cast<unsigned short>(bits)));
  };
  const float scale_a = scale_of(g.scale_a), scale_b = scale_of(g.scale_b);
  const float zero_a = int4_magic_value<T>() + static_cast<float>(g.zero_a);
  const float zero_b = int4_magic_value<T>() + static_cast<float>(g.zero_b);
#pragma unroll
  for (int t = 0; t < NT; ++t) {  // C rows: registers 0, 1 row r; 2, 3 row r + 8
    acc[t][0] += (part[t][0] - zero_a * xsum[t][0]) * scale_a;
    acc[t][1] += (part[t][1] - zero_a * xsum[t][1]) * scale_a;
    acc[t][2] += (part[t][2] - zero_b * xsum[t][2]) * scale_b;
    acc[t][3] += (part[t][3] - zero_b * xsum[t][3]) * scale_b;
  }
}

// Where the group parameters of a tile's rows start in their (N, groups) arrays: row_a * groups
// and row_b * groups (offsets, so that the arrays' pointers stay kernel parameters).
struct Int4GroupRows {
  int32_t a, b;
};

// The group of 4-bit step s: s >> shift when the steps per group are a power of two (shift
// >= 0), else s / steps_per_group.
__device__ __forceinline__ int int4_group_of(int s, int shift, int steps_per_group) {
  return shift >= 0 ? s >> shift : s / steps_per_group;
}

// The group parameters of 4-bit step s: scales (N, groups) f16 bits, zeros (N, groups) u8.
__device__ __forceinline__ Int4Group load_int4_group(const uint16_t* scales, const uint8_t* zeros,
                                                     const Int4GroupRows& rows, int shift,
                                                     int steps_per_group, int s) {
  const int g = int4_group_of(s, shift, steps_per_group);
  Int4Group p;
  p.scale_a = __ldg(scales + rows.a + g);
  p.scale_b = __ldg(scales + rows.b + g);
  p.zero_a = __ldg(zeros + rows.a + g);
  p.zero_b = __ldg(zeros + rows.b + g);
  return p;
}

// ---- NF4 (kGemvNf4; backend/weight.h's kNf4): the same loads and steps as W4A16. A byte's two
// codes (the even k in the high nibble) become the pair (level[hi], level[lo]) * absmax in fp32,
// rounded to x's type (the lane's 32 codes lie in one 64-block), and meet x's words as they are.

// The absmax of 64-block b (N, blocks) f32, its bits as Int4Group's scales (zeros unused).
__device__ __forceinline__ Int4Group load_nf4_absmax(const float* absmax, const Int4GroupRows& rows,
                                                     int b) {
  Int4Group p;
  p.scale_a = __float_as_uint(__ldg(absmax + rows.a + b));
  p.scale_b = __float_as_uint(__ldg(absmax + rows.b + b));
  p.zero_a = p.zero_b = 0;
  return p;
}

// One NF4 step: 16 rows x 128 k against NT n-tiles; acc += sum w x.
template <typename T, int NT>
__device__ __forceinline__ void gemv_step_nf4(float (&acc)[NT][4], const uint4& wa, const uint4& wb,
                                              const uint4 (&xv)[NT][4], const Int4Group& g,
                                              const float2* lut) {
  const float scale_a = __uint_as_float(g.scale_a), scale_b = __uint_as_float(g.scale_b);
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t word_a = j == 0 ? wa.x : j == 1 ? wa.y : j == 2 ? wa.z : wa.w;
    const uint32_t word_b = j == 0 ? wb.x : j == 1 ? wb.y : j == 2 ? wb.z : wb.w;
    uint32_t pa[4], pb[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {  // byte i: k = 2i (high nibble), 2i + 1
      const float2 la = lut[(word_a >> (8 * i)) & 0xFFu];
      const float2 lb = lut[(word_b >> (8 * i)) & 0xFFu];
      pa[i] = pack2_from_f32<T>(la.x * scale_a, la.y * scale_a);
      pb[i] = pack2_from_f32<T>(lb.x * scale_b, lb.y * scale_b);
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
