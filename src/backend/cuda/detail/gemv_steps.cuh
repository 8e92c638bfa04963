// The decode GEMV's parameters and its building blocks (gemv_kernel.cuh's design): the formats,
// epilogues and operands of a launch, one warp step of each weight format (the tensor-core MMAs
// and the conversions feeding them), the weight and activation loads of a step, and the launch
// geometry (row tiles, shared memory sizes).
#pragma once

#include <type_traits>

#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/gemv_int4.cuh"
#include "backend/cuda/detail/mma.cuh"
#include "backend/cuda/detail/quant_row.cuh"

namespace ib::cuda {

inline constexpr int kGemvRows = 16;   // output features per block
inline constexpr int kGemvStepK = 64;  // k per warp step

enum GemvEpilogue : int {
  kGemvStore = 0,       // out = result (+ bias)
  kGemvAccumulate = 1,  // out += result (a residual add; out has x's dtype)
  kGemvSwiGlu = 2,      // out (M, N / 2) = silu(result[:, :N/2]) * result[:, N/2:]
  kGemvRopeCache = 3,   // out = qkv rows, q and k rotated (RoPE), k and v written to the cache
};

// What the kGemvRopeCache epilogue needs (the operands of rope_and_cache).
struct GemvRopeCache {
  const int32_t* positions = nullptr;     // (M)
  const int32_t* slot_mapping = nullptr;  // (M); -1: no cache write
  const float* inv_freq = nullptr;        // (head_dim / 2)
  void* k_cache = nullptr;                // (num_blocks, Hkv, block_size, head_dim)
  void* v_cache = nullptr;
  int num_heads = 0, num_kv_heads = 0, head_dim = 0, block_size = 0;
  bool cache_fp8 = false;  // the cache holds E4M3 with these scales (to_kv_cache), else TOut
  float k_scale = 1.0f, v_scale = 1.0f;
};

// The weight formats of the kernel (its kW parameter).
enum GemvWeight : int {
  kGemvDense = 0,   // w in x's dtype
  kGemvFp8 = 1,     // E4M3 w, E4M3 x (already quantized)
  kGemvInt8 = 2,    // int8 w, x in its dtype (W8A16)
  kGemvInt8A8 = 3,  // int8 w, int8 x (already quantized)
  kGemvInt4 = 4,    // 4-bit codes with f16 group scales and u8 zero points, x in its dtype
  kGemvNf4 = 5,     // NF4 codes with an f32 absmax per 64, x in its dtype
};

// What the quantized variants read besides x and w.
struct GemvQuant {
  const float* w_scales = nullptr;  // (N) per output row
  const float* x_scales = nullptr;  // (M) per token, 1 / rms(x) included where kRms (W8A8 only)
  // INT8 W8A8 with an asymmetric static activation scale (weight.h): x's codes are u - 128, and
  // the sum is corrected by - zero * row_sums[n], zero = z - 128 (0: no correction).
  const int32_t* row_sums = nullptr;  // (N)
  int zero = 0;
  // kGemvInt4: scales (N, groups) f16 bits, zeros (N, groups) u8, group_size / 128 steps each
  // (log2 of that in steps_shift when it is a power of two, else -1).
  const uint16_t* g_scales = nullptr;
  const uint8_t* g_zeros = nullptr;
  int groups = 0, steps_per_group = 0, steps_shift = -1;
  const float* g_absmax = nullptr;  // kGemvNf4: (N, K / 64) f32
  // kXShared with W8A8 and x_scales null (one token): the kernel quantizes x itself as the
  // quantize kernel would (quant_row.cuh): x_raw is the activation row in T (the h of rms_norm(h)
  // where kRms), q_gain the gain (K) or null, q_fixed the static scale (0: dynamic). kXShared
  // with W8A16 / 4-bit and q_gain set (IB_GEMV_STAGE_NORM): x_raw is x, normalised in the block
  // with the gain q_gain (norm_row.cuh; the launch's eps).
  const void* q_gain = nullptr;
  StaticActQuant q_fixed{};
  // IB_QUANT_SYNC (null: none): the quantize kernel (W8A8) or norm kernel (W8A16, 4-bit)
  // launched right before the GEMV counts its sync_blocks blocks into sync[0] once their outputs
  // are stored; the GEMV's blocks wait for that instead of the kernel's end, once each, and the
  // last of them past its wait sets sync[0] and sync[1] (their count) back to 0.
  unsigned* sync = nullptr;
  unsigned sync_blocks = 0;
};

// kFp8: the lane's 16 bytes of already quantized x per n-tile at element offset kk.
template <int NT>
__device__ __forceinline__ void gemv_load_xq(const uint8_t* const (&ptr)[NT], int64_t kk,
                                             uint32_t (&xq)[NT][4]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(ptr[t] + kk));
    xq[t][0] = v.x;
    xq[t][1] = v.y;
    xq[t][2] = v.z;
    xq[t][3] = v.w;
  }
}

__device__ __forceinline__ uint32_t gemv_word(const uint4& v, int i) {
  return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w;
}

// Sum of squares of one step's x values, per n-tile (kRms).
template <typename T, int NT>
__device__ __forceinline__ void gemv_sum_squares(float (&ss)[NT], const uint4 (&xv)[NT][2]) {
#pragma unroll
  for (int t = 0; t < NT; ++t)
#pragma unroll
    for (int c = 0; c < 2; ++c)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 v = unpack2_f32<T>(gemv_word(xv[t][c], i));
        ss[t] += v.x * v.x + v.y * v.y;
      }
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

// c (16x8 f32) += a (16x32 E4M3, row) * b (32x8 E4M3, col).
__device__ __forceinline__ void mma_16832(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// c (16x8 s32) += a (16x32 s8, row) * b (32x8 s8, col): the E4M3 MMA's fragment layout.
__device__ __forceinline__ void mma_16832(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                          uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One 8-bit warp step: 16 rows x 64 k (the lane's 16 bytes of rows r and r + 8) against NT
// n-tiles of quantized x (the lane's 16 codes of token t * 8 + r, four words). TAcc float: E4M3
// codes (FP8); int: int8 codes (INT8 W8A8), summed exactly.
template <int NT, typename TAcc>
__device__ __forceinline__ void gemv_step_8bit(TAcc (&acc)[NT][4], const uint4& wa, const uint4& wb,
                                               const uint32_t (&xq)[NT][4]) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const uint32_t a0 = gemv_word(wa, 2 * h), a1 = gemv_word(wb, 2 * h);
    const uint32_t a2 = gemv_word(wa, 2 * h + 1), a3 = gemv_word(wb, 2 * h + 1);
#pragma unroll
    for (int t = 0; t < NT; ++t) mma_16832(acc[t], a0, a1, a2, a3, xq[t][2 * h], xq[t][2 * h + 1]);
  }
}

// Four int8 values (one word, lowest byte first) as two words of two T each, exactly: each byte
// b, biased to b + 128, becomes the low byte of the fp32 2^23 + b + 128, from which 2^23 + 128 is
// subtracted (exact), then rounded to T (exact for |b| <= 128).
template <typename T>
__device__ __forceinline__ void int8x4_to_pairs(uint32_t word, uint32_t& lo, uint32_t& hi) {
  const uint32_t biased = word ^ 0x80808080u;
  float f[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    f[i] = __uint_as_float(__byte_perm(biased, 0x4B000000u, 0x7540u | static_cast<uint32_t>(i))) -
           8388736.0f;
  lo = pack2_from_f32<T>(f[0], f[1]);
  hi = pack2_from_f32<T>(f[2], f[3]);
}

// W8A16: a lane's 16 int8 weights of one row (one 16-byte load) as the dense form's two 16-byte
// words of 8 T each.
template <typename T>
__device__ __forceinline__ void gemv_widen_int8(const uint4& q, uint4 (&wd)[2]) {
  int8x4_to_pairs<T>(q.x, wd[0].x, wd[0].y);
  int8x4_to_pairs<T>(q.y, wd[0].z, wd[0].w);
  int8x4_to_pairs<T>(q.z, wd[1].x, wd[1].y);
  int8x4_to_pairs<T>(q.w, wd[1].z, wd[1].w);
}

// Weight loads of one warp step at element offset kk: w rows r and r + 8 (16-bit elements: two
// 16-byte loads per row; E4M3 bytes: one).
template <typename TW, int kLoads>
__device__ __forceinline__ void gemv_load_w(const TW* wa_ptr, const TW* wb_ptr, int64_t kk,
                                            uint4 (&wa)[kLoads], uint4 (&wb)[kLoads]) {
#pragma unroll
  for (int i = 0; i < kLoads; ++i) {
    wa[i] = load_stream16(wa_ptr + kk + i * 8);
    wb[i] = load_stream16(wb_ptr + kk + i * 8);
  }
}

// Activation loads of one warp step at element offset kk: NT token rows (kShared: x_ptr point
// into shared memory).
template <typename T, int NT, bool kShared = false>
__device__ __forceinline__ void gemv_load_x(const T* const (&x_ptr)[NT], int64_t kk,
                                            uint4 (&xv)[NT][2]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    xv[t][0] = load_x16<kShared>(x_ptr[t] + kk);
    xv[t][1] = load_x16<kShared>(x_ptr[t] + kk + 8);
  }
}

// Loads of one warp step at element offset kk: w rows r / r + 8 and NT token rows.
template <typename T, int NT>
__device__ __forceinline__ void gemv_load(const T* wa_ptr, const T* wb_ptr,
                                          const T* const (&x_ptr)[NT], int64_t kk, uint4 (&wa)[2],
                                          uint4 (&wb)[2], uint4 (&xv)[NT][2]) {
  gemv_load_w<T, 2>(wa_ptr, wb_ptr, kk, wa, wb);
  gemv_load_x<T, NT>(x_ptr, kk, xv);
}

// The row tiles of a launch (one block each, or fewer persistent blocks looping over them):
// 16 weight rows each, 8 features of a SwiGLU pair (n = 2F rows).
__host__ __device__ inline int gemv_tile_count(int epilogue, int n) {
  return epilogue == kGemvSwiGlu ? (n / 2 + kGemvRows / 2 - 1) / (kGemvRows / 2)
                                 : (n + kGemvRows - 1) / kGemvRows;
}

// The dynamic shared memory of a kXShared variant. raw: the block takes x itself and quantizes
// (W8A8, IB_GEMV_FUSE_QUANT) or normalises it (IB_GEMV_STAGE_NORM) there. W8A8: raw, the codes
// (k bytes), then x and the gain (2k each, the gain where there is one); else the quantize
// kernel's codes (k). The others: x (2k), then with raw the gain (2k, where there is one).
__host__ __device__ constexpr size_t gemv_x_shared_bytes(bool w8a8, bool raw, bool gain, int64_t k,
                                                         size_t elem) {
  const size_t with_gain = static_cast<size_t>(k) * elem * (raw && gain ? 2 : 1);
  return !w8a8 ? with_gain : (raw ? static_cast<size_t>(k) + with_gain : static_cast<size_t>(k));
}

// nvec 16-byte vectors from global into shared memory by the whole block, each thread's loads
// issued kBatch at a time before their stores: one round trip for a row of up to kBatch x 16
// bytes a thread. No barrier.
template <int kBatch>
__device__ __forceinline__ void copy16_to_shared(uint4* dst, const uint4* __restrict__ src,
                                                 int nvec) {
  const int threads = static_cast<int>(blockDim.x);
  for (int base = static_cast<int>(threadIdx.x); base < nvec; base += kBatch * threads) {
    uint4 v[kBatch];
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (base + j * threads < nvec) v[j] = __ldg(src + base + j * threads);
    }
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      if (base + j * threads < nvec) dst[base + j * threads] = v[j];
    }
  }
}

// The dynamic shared memory of a dense ring variant (kRing steps of kWarps warps, two rows of two
// 16-byte loads per lane).
__host__ __device__ constexpr size_t gemv_ring_smem_bytes(int ring, int warps) {
  return static_cast<size_t>(ring) * warps * 2 * 2 * 32 * 16;
}

}  // namespace ib::cuda
