// kGguf on CUDA (backend/weight.h): a GGUF file's matmul weights in llama.cpp's block formats,
// decoded from core/ggml_blocks.h's layouts (the CPU backend, cpu/quant_gguf.cpp, is the oracle).
//
// Activations are quantized per 32-element block (weight.h): each token's block b becomes 32 int8
// codes and a float2 {d, d * sum of the codes}. A weight block of 32 elements decodes to 32 int8
// codes c_i (four to a 32-bit word), scales s_lo (elements 0-15) and s_hi (16-31) and an offset
// o, w_i = s * c_i - o, so the block's part of y is
//   d * (s_lo * dot(c, xq)[0..15] + s_hi * dot(c, xq)[16..31]) - o * d * sum(xq),
// each dot four dp4a (exact in int32). Q8_0: c = q, s = d, o = 0. Q4_0: c = q in 0..15, o = 8 d.
// Q4_K / Q5_K: c = q, s = d * sc, o = dmin * m of the sub-block. Q6_K: c = q - 32 (signed), the
// two 16-element scales of its sub-blocks, o = 0.
//
// Decode (M <= 8 tokens): a warp per two weight rows, lane l taking the rows' 32-element blocks l,
// l + 32, ...; then a warp reduction per token. The fused ops' forms: x's norm computed by the
// kernel that quantizes it (rms_q8_kernel: the normed values rounded to x's dtype first, as the
// norm kernel stores them), and the SwiGLU in the GEMV's epilogue (a warp per gate row and its
// up row, both rounded to x's dtype before silu(g) * u, as the unfused ops round them). Every
// kernel here takes part in programmatic dependent launch; the GEMV asks L2 for the first 4 KB of
// its rows before it waits. Prefill (M > 8): the weight dequantized into the activation dtype for
// cuBLASLt, x through its int8 round trip (cuda_backend.cpp).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
// A named namespace (not an anonymous one) so that profiles name the kernels in full.
namespace gguf {

constexpr int kBlock = 32;  // elements per activation block and per decoded weight block
constexpr int kThreads = 128;

// The per-launch view of a kGguf weight: rows, their stride, and the segments' types.
struct GgufView {
  const uint8_t* data;
  int64_t stride;  // bytes per row (data.dim(1))
  int64_t rows, cols;
  int count;
  int64_t begin[kGgufMaxSegments];
  uint32_t type[kGgufMaxSegments];
};

GgufView view_of(const WeightRef& w) {
  GgufView v{};
  v.data = w.data.as<const uint8_t>();
  v.stride = w.data.dim(1);
  v.rows = w.rows();
  v.cols = w.cols();
  v.count = w.gguf.count;
  for (int s = 0; s < kGgufMaxSegments; ++s) {
    v.begin[s] = w.gguf.begin[s];
    v.type[s] = static_cast<uint32_t>(w.gguf.type[s]);
  }
  return v;
}

// The type of row's segment; unrolled, so that the parameter's arrays are read with constant
// indices (a dynamic index would copy the whole view to local memory).
__device__ __forceinline__ uint32_t segment_type(const GgufView& v, int64_t row) {
  uint32_t type = v.type[0];
#pragma unroll
  for (int s = 1; s < kGgufMaxSegments; ++s) {
    if (s < v.count && row >= v.begin[s]) type = v.type[s];
  }
  return type;
}

__device__ __forceinline__ float load_half(const uint8_t* p) {
  return __half2float(__ushort_as_half(*reinterpret_cast<const uint16_t*>(p)));
}

// Four bytes at a 2-byte aligned address.
__device__ __forceinline__ uint32_t load_u32_a2(const uint8_t* p) {
  const auto* h = reinterpret_cast<const uint16_t*>(p);
  return static_cast<uint32_t>(__ldg(h)) | (static_cast<uint32_t>(__ldg(h + 1)) << 16);
}

// One decoded 32-element weight block (above).
struct WeightBlock {
  int32_t c[8];
  float s_lo, s_hi, o;
};

// Byte i (0..11) of a Q4_K / Q5_K header's scales (header bytes 4..15: words y, z, w), picked by
// selects and a shift: indexing the header's bytes as an array would put it in local memory.
__device__ __forceinline__ int scale_byte(const uint4& head, int i) {
  const uint32_t w = i < 4 ? head.y : i < 8 ? head.z : head.w;
  return static_cast<int>((w >> (8 * (i & 3))) & 0xFFu);
}

// Sub-block j's 6-bit scale and min (ggml_blocks.h).
__device__ __forceinline__ void scale_min_k4(const uint4& head, int j, int& sc, int& m) {
  if (j < 4) {
    sc = scale_byte(head, j) & 63;
    m = scale_byte(head, j + 4) & 63;
  } else {
    sc = (scale_byte(head, j + 4) & 0xF) | ((scale_byte(head, j - 4) >> 6) << 4);
    m = (scale_byte(head, j + 4) >> 4) | ((scale_byte(head, j) >> 6) << 4);
  }
}

template <uint32_t kType>
__device__ __forceinline__ WeightBlock decode_block(const uint8_t* row, int b) {
  WeightBlock w;
  if constexpr (kType == static_cast<uint32_t>(GgmlType::kQ8_0)) {  // 34 bytes: d, q[32]
    const uint8_t* blk = row + int64_t{b} * 34;
    const float d = load_half(blk);
#pragma unroll
    for (int i = 0; i < 8; ++i) w.c[i] = static_cast<int32_t>(load_u32_a2(blk + 2 + 4 * i));
    w.s_lo = w.s_hi = d;
    w.o = 0.0f;
  } else if constexpr (kType == static_cast<uint32_t>(GgmlType::kQ4_0)) {  // 18 bytes: d, qs[16]
    const uint8_t* blk = row + int64_t{b} * 18;
    const float d = load_half(blk);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t q = load_u32_a2(blk + 2 + 4 * i);
      w.c[i] = static_cast<int32_t>(q & 0x0F0F0F0Fu);             // elements 4i .. 4i + 3
      w.c[4 + i] = static_cast<int32_t>((q >> 4) & 0x0F0F0F0Fu);  // 16 + 4i ..
    }
    w.s_lo = w.s_hi = d;
    w.o = 8.0f * d;
  } else if constexpr (kType == static_cast<uint32_t>(GgmlType::kQ4_K) ||
                       kType == static_cast<uint32_t>(GgmlType::kQ5_K)) {
    constexpr bool k5 = kType == static_cast<uint32_t>(GgmlType::kQ5_K);
    constexpr int kBytes = k5 ? 176 : 144;
    constexpr int kQs = k5 ? 48 : 16;  // qs offset (Q5_K: qh[32] at 16)
    const int j = b & 7;               // sub-block of the super-block
    const uint8_t* blk = row + int64_t{b >> 3} * kBytes;
    const uint4 head = __ldg(reinterpret_cast<const uint4*>(blk));  // d, dmin, scales[12]
    const float d = __half2float(__ushort_as_half(static_cast<uint16_t>(head.x & 0xFFFFu)));
    const float dmin = __half2float(__ushort_as_half(static_cast<uint16_t>(head.x >> 16)));
    int sc, m;
    scale_min_k4(head, j, sc, m);
    // Sub-blocks 2c and 2c + 1 share qs bytes 32c .. 32c + 31: low and high nibbles.
    const auto* qs = reinterpret_cast<const uint4*>(blk + kQs + 32 * (j >> 1));
    const uint4 q0 = __ldg(qs), q1 = __ldg(qs + 1);
    const uint32_t words[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
    const int shift = (j & 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) w.c[i] = static_cast<int32_t>((words[i] >> shift) & 0x0F0F0F0Fu);
    if constexpr (k5) {  // the fifth bit of element l of sub-block j: bit j of qh[l]
      const auto* qh = reinterpret_cast<const uint4*>(blk + 16);
      const uint4 h0 = __ldg(qh), h1 = __ldg(qh + 1);
      const uint32_t hw[8] = {h0.x, h0.y, h0.z, h0.w, h1.x, h1.y, h1.z, h1.w};
#pragma unroll
      for (int i = 0; i < 8; ++i) w.c[i] |= static_cast<int32_t>(((hw[i] >> j) & 0x01010101u) << 4);
    }
    w.s_lo = w.s_hi = d * static_cast<float>(sc);
    w.o = dmin * static_cast<float>(m);
  } else {  // Q6_K, 210 bytes: ql[128], qh[64], int8 scales[16], d
    const int s8 = b & 7;
    const int half = s8 >> 2, sub = s8 & 3;
    const uint8_t* blk = row + int64_t{b >> 3} * 210;
    const uint8_t* ql = blk + 64 * half + 32 * (sub & 1);
    const uint8_t* qh = blk + 128 + 32 * half;
    const int nib = (sub >> 1) * 4;
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint32_t lo = (load_u32_a2(ql + 4 * i) >> nib) & 0x0F0F0F0Fu;
      const uint32_t hi = ((load_u32_a2(qh + 4 * i) >> (2 * sub)) & 0x03030303u) << 4;
      w.c[i] = static_cast<int32_t>(__vsub4(lo | hi, 0x20202020u));  // q - 32, per byte
    }
    const float d = load_half(blk + 208);
    const auto* scales = reinterpret_cast<const int8_t*>(blk + 192 + 8 * half + 2 * sub);
    w.s_lo = d * static_cast<float>(scales[0]);
    w.s_hi = d * static_cast<float>(scales[1]);
    w.o = 0.0f;
  }
  return w;
}

// One 32-element block of x (v, as kBlock / kVec 16-byte vectors) quantized as weight.h defines:
// the codes into codes_out (32 bytes, 16-byte aligned) and {d, d * sum} into scale_out, or with
// kRoundTrip codes * d into dst (32 elements of T).
template <typename T, bool kRoundTrip>
__device__ __forceinline__ void quantize_block32(const float (&v)[kBlock / kVec16<T>][kVec16<T>],
                                                 int8_t* codes_out, float2* scale_out, T* dst) {
  constexpr int kVec = kVec16<T>;
  float amax = 0.0f;
#pragma unroll
  for (int j = 0; j < kBlock / kVec; ++j)
#pragma unroll
    for (int t = 0; t < kVec; ++t) amax = fmaxf(amax, fabsf(v[j][t]));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  const float d = amax / 127.0f;
  int q[kBlock];
  int sum = 0;
#pragma unroll
  for (int j = 0; j < kBlock; ++j) {
    q[j] = static_cast<int>(fminf(fmaxf(rintf(v[j / kVec][j % kVec] * inv), -127.0f), 127.0f));
    sum += q[j];
  }
  if constexpr (kRoundTrip) {
#pragma unroll
    for (int j = 0; j < kBlock / kVec; ++j) {
      float back[kVec];
#pragma unroll
      for (int t = 0; t < kVec; ++t) back[t] = static_cast<float>(q[j * kVec + t]) * d;
      store16_f32(dst + j * kVec, back);
    }
  } else {
    uint32_t words[8];
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      words[w] = (static_cast<uint32_t>(q[4 * w] & 0xFF)) |
                 (static_cast<uint32_t>(q[4 * w + 1] & 0xFF) << 8) |
                 (static_cast<uint32_t>(q[4 * w + 2] & 0xFF) << 16) |
                 (static_cast<uint32_t>(q[4 * w + 3] & 0xFF) << 24);
    }
    auto* out = reinterpret_cast<uint4*>(codes_out);
    out[0] = make_uint4(words[0], words[1], words[2], words[3]);
    out[1] = make_uint4(words[4], words[5], words[6], words[7]);
    *scale_out = make_float2(d, d * static_cast<float>(sum));
  }
}

// x (M, K) -> codes (M, K) int8 and per block {d, d * sum(codes)} (M, K / 32) float2; with
// round_trip, dst (M, K) of T = codes * d instead (the prefill path's x'). A thread per block.
template <typename T, bool kRoundTrip>
__global__ void quantize_q8_blocks_kernel(const T* __restrict__ x, int8_t* __restrict__ codes,
                                          float2* __restrict__ scales, T* __restrict__ dst,
                                          int64_t blocks) {
  constexpr int kVec = kVec16<T>;  // elements a 16-byte access holds
  pdl_wait();
  pdl_trigger();
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= blocks) return;
  float v[kBlock / kVec][kVec];
#pragma unroll
  for (int j = 0; j < kBlock / kVec; ++j) load16_f32(x + i * kBlock + j * kVec, v[j]);
  quantize_block32<T, kRoundTrip>(v, kRoundTrip ? nullptr : codes + i * kBlock,
                                  kRoundTrip ? nullptr : scales + i,
                                  kRoundTrip ? dst + i * kBlock : nullptr);
}

constexpr int kNormThreads = 256;

// One 32-element block of the fused ops' input: x = h / rms(h) * gain rounded to T (as
// rms_norm_kernel stores it; v holds h, g the gain), then quantized as above.
template <typename T>
__device__ __forceinline__ void quantize_normed_block32(
    float (&v)[kBlock / kVec16<T>][kVec16<T>], const float (&g)[kBlock / kVec16<T>][kVec16<T>],
    float inv_rms, int8_t* codes_out, float2* scale_out) {
#pragma unroll
  for (int j = 0; j < kBlock / kVec16<T>; ++j)
#pragma unroll
    for (int i = 0; i < kVec16<T>; ++i) v[j][i] = to_f32(from_f32<T>(v[j][i] * inv_rms * g[j][i]));
  quantize_block32<T, false>(v, codes_out, scale_out, nullptr);
}

// The fused ops' input: token row blockIdx.x of h (M, K) normed and quantized per 32 into codes
// and scales (quantize_normed_block32), h read once for the sum of squares and again per block
// (K past 32 kNormThreads; below, rms_q8_wide_kernel).
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    rms_q8_kernel(const T* __restrict__ h, const T* __restrict__ gain, float eps,
                  int8_t* __restrict__ codes, float2* __restrict__ scales, int64_t k) {
  constexpr int kVec = kVec16<T>;
  __shared__ float scratch[32];
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x;
  const T* hr = h + row * k;
  float sum_sq = 0.0f;
  for (int64_t c = int64_t{threadIdx.x} * kVec; c < k; c += int64_t{kNormThreads} * kVec) {
    float v[kVec];
    load16_f32(hr + c, v);
#pragma unroll
    for (int i = 0; i < kVec; ++i) sum_sq += v[i] * v[i];
  }
  const float total = block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / static_cast<float>(k) + eps);
  const int64_t blocks = k / kBlock;
  for (int64_t b = threadIdx.x; b < blocks; b += kNormThreads) {
    float v[kBlock / kVec][kVec], g[kBlock / kVec][kVec];
#pragma unroll
    for (int j = 0; j < kBlock / kVec; ++j) {
      load16_f32(hr + b * kBlock + j * kVec, v[j]);
      load16_f32(gain + b * kBlock + j * kVec, g[j]);
    }
    quantize_normed_block32<T>(v, g, inv_rms, codes + row * k + b * kBlock,
                               scales + row * blocks + b);
  }
}

// rms_q8_kernel with a 32-element block per thread (K <= 32 kNormThreads, the form launched there):
// the thread's gain loaded before the PDL wait, its x kept in registers between the sum of squares
// and the quantization (one global read of x instead of two).
template <typename T>
__global__ void __launch_bounds__(kNormThreads)
    rms_q8_wide_kernel(const T* __restrict__ h, const T* __restrict__ gain, float eps,
                       int8_t* __restrict__ codes, float2* __restrict__ scales, int64_t k) {
  constexpr int kVec = kVec16<T>;
  __shared__ float scratch[32];
  const int64_t blocks = k / kBlock;
  const int64_t b = threadIdx.x;
  const bool active = b < blocks;
  float g[kBlock / kVec][kVec], v[kBlock / kVec][kVec];
  if (active) {
#pragma unroll
    for (int j = 0; j < kBlock / kVec; ++j) load16_f32(gain + b * kBlock + j * kVec, g[j]);
  }
  pdl_wait();
  pdl_trigger();
  const int64_t row = blockIdx.x;
  float sum_sq = 0.0f;
  if (active) {
#pragma unroll
    for (int j = 0; j < kBlock / kVec; ++j) {
      load16_f32(h + row * k + b * kBlock + j * kVec, v[j]);
#pragma unroll
      for (int i = 0; i < kVec; ++i) sum_sq += v[j][i] * v[j][i];
    }
  }
  const float total = block_sum(sum_sq, scratch);
  const float inv_rms = rsqrtf(total / static_cast<float>(k) + eps);
  if (!active) return;
  quantize_normed_block32<T>(v, g, inv_rms, codes + row * k + b * kBlock,
                             scales + row * blocks + b);
}

// f.template operator()<kType>() for a segment's run-time type.
template <typename F>
__device__ __forceinline__ void with_block_type(uint32_t type, F&& f) {
  switch (type) {
    case static_cast<uint32_t>(GgmlType::kQ8_0):
      return f.template operator()<static_cast<uint32_t>(GgmlType::kQ8_0)>();
    case static_cast<uint32_t>(GgmlType::kQ4_0):
      return f.template operator()<static_cast<uint32_t>(GgmlType::kQ4_0)>();
    case static_cast<uint32_t>(GgmlType::kQ4_K):
      return f.template operator()<static_cast<uint32_t>(GgmlType::kQ4_K)>();
    case static_cast<uint32_t>(GgmlType::kQ5_K):
      return f.template operator()<static_cast<uint32_t>(GgmlType::kQ5_K)>();
    default:
      return f.template operator()<static_cast<uint32_t>(GgmlType::kQ6_K)>();
  }
}

constexpr int kMaxTokens = kGgufGemvMaxM;

// kR rows' dot products with kM tokens' x over blocks [begin, end): lane l takes blocks
// begin + l, begin + l + 32, ... of every row, the x codes and scales of a block loaded once for
// the kR rows.
template <uint32_t kType, int kM, int kR>
__device__ __forceinline__ void rows_dot(const uint8_t* const (&rows)[kR], int begin, int end,
                                         const int8_t* codes, const float2* scales, int64_t k,
                                         int lane, int tokens, float (&acc)[kR][kMaxTokens]) {
  const int64_t blocks_per_row = k / kBlock;
#pragma unroll 2
  for (int b = begin + lane; b < end; b += 32) {
    WeightBlock w[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r) w[r] = decode_block<kType>(rows[r], b);
#pragma unroll
    for (int m = 0; m < kM; ++m) {
      if (m >= tokens) break;  // kM = 8 serves 5-7 tokens
      const auto* xq = reinterpret_cast<const uint4*>(codes + m * k + int64_t{b} * kBlock);
      const uint4 x0 = __ldg(xq), x1 = __ldg(xq + 1);
      const float2 s = __ldg(scales + m * blocks_per_row + b);
#pragma unroll
      for (int r = 0; r < kR; ++r) {
        int lo = 0, hi = 0;
        lo = __dp4a(w[r].c[0], static_cast<int>(x0.x), lo);
        lo = __dp4a(w[r].c[1], static_cast<int>(x0.y), lo);
        lo = __dp4a(w[r].c[2], static_cast<int>(x0.z), lo);
        lo = __dp4a(w[r].c[3], static_cast<int>(x0.w), lo);
        hi = __dp4a(w[r].c[4], static_cast<int>(x1.x), hi);
        hi = __dp4a(w[r].c[5], static_cast<int>(x1.y), hi);
        hi = __dp4a(w[r].c[6], static_cast<int>(x1.z), hi);
        hi = __dp4a(w[r].c[7], static_cast<int>(x1.w), hi);
        acc[r][m] +=
            s.x * (w[r].s_lo * static_cast<float>(lo) + w[r].s_hi * static_cast<float>(hi)) -
            w[r].o * s.y;
      }
    }
  }
}

// Result y of (token m, row) into out (M, rows): =, or += with accumulate, + bias.
template <typename T>
__device__ __forceinline__ void store_result(float y, int m, int64_t row, int64_t rows,
                                             const T* bias, T* out, bool accumulate) {
  float r = y + (bias ? to_f32(bias[row]) : 0.0f);
  T* o = out + m * rows + row;
  if (accumulate) r += to_f32(*o);
  *o = from_f32<T>(r);
}

// Row `row`'s results for the first `tokens` of kM tokens (warp-reduced) into out (store_result).
template <typename T, int kM>
__device__ __forceinline__ void store_row(const float (&acc)[kMaxTokens], int64_t row, int64_t rows,
                                          int lane, int tokens, const T* bias, T* out,
                                          bool accumulate) {
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    if (m >= tokens) break;
    const float y = warp_sum(acc[m]);
    if (lane == 0) store_result(y, m, row, rows, bias, out, accumulate);
  }
}

// out (M, F) = silu(g) * u of the warp's gate and up rows' results (g, u: each lane's partial
// sums), both rounded to T first (the unfused ops store gate_up in T).
template <typename T, int kM>
__device__ __forceinline__ void store_swiglu(const float (&g)[kMaxTokens],
                                             const float (&u)[kMaxTokens], int64_t feature,
                                             int64_t f, int lane, int tokens, T* out) {
#pragma unroll
  for (int m = 0; m < kM; ++m) {
    if (m >= tokens) break;
    const float gs = warp_sum(g[m]), us = warp_sum(u[m]);
    if (lane == 0) {
      const float gr = to_f32(from_f32<T>(gs)), ur = to_f32(from_f32<T>(us));
      out[m * f + feature] = from_f32<T>(gr / (1.0f + expf(-gr)) * ur);
    }
  }
}

// out (M, N) (=, or += with accumulate) x' @ w^T (+ bias): a warp per two rows, which share the
// x loads (each alone where the second is past N or in another segment). kSwiGlu: w holds the
// gate rows then the up rows (2F), the warp's rows are gate row j and up row F + j, and out
// (M, F) gets silu(gate) * up (no bias). kSplit (IB_GGUF_WIDE; the block's warps, not with
// kSwiGlu): a block per two rows, its warps taking a quarter of K each, their sums added through
// shared memory. tokens: M, at most kM (kM = 8 serves 5-7 tokens: the tokens past M are neither
// read from the quantized x nor stored).
template <typename T, int kM, bool kSwiGlu, int kSplit = 1>
__global__ void __launch_bounds__(kThreads)
    gemv_gguf_kernel(GgufView v, const int8_t* __restrict__ codes,
                     const float2* __restrict__ scales, const T* __restrict__ bias,
                     T* __restrict__ out, bool accumulate, int tokens) {
  static_assert(kSplit == 1 || (kSplit == kThreads / 32 && !kSwiGlu),
                "K split across all of a block's warps, plain stores only");
  __shared__ float split_sums[kSplit][2][kMaxTokens];
  const int lane = threadIdx.x & 31;
  const int part = kSplit > 1 ? static_cast<int>(threadIdx.x / 32) : 0;  // of K
  const int64_t warp =
      kSplit > 1 ? int64_t{blockIdx.x} : blockIdx.x * int64_t{kThreads / 32} + threadIdx.x / 32;
  const int64_t f = v.rows / 2;  // kSwiGlu's features
  const int64_t row0 = kSwiGlu ? warp : 2 * warp;
  const int64_t row1 = kSwiGlu ? f + warp : row0 + 1;
  const bool valid0 = kSwiGlu ? warp < f : row0 < v.rows;
  const bool valid1 = valid0 && row1 < v.rows;
  // The rows' first 4 KB into L2 while the previous kernel finishes (the weights are constant).
  const int64_t ahead = v.stride < 4096 ? v.stride : 4096;
  if (lane * 128 < ahead) {
    if (valid0) prefetch_l2(v.data + row0 * v.stride + lane * 128);
    if (valid1) prefetch_l2(v.data + row1 * v.stride + lane * 128);
  }
  pdl_wait();
  pdl_trigger();
  if (!valid0) return;  // (the whole block where kSplit > 1)
  const int blocks = static_cast<int>(v.cols / kBlock);
  const int per_part = (blocks + kSplit - 1) / kSplit;
  const int begin = part * per_part;
  const int end = begin + per_part < blocks ? begin + per_part : blocks;
  const uint32_t type = segment_type(v, row0);
  float acc[2][kMaxTokens] = {};
  if (valid1 && segment_type(v, row1) == type) {
    const uint8_t* const rows[2] = {v.data + row0 * v.stride, v.data + row1 * v.stride};
    with_block_type(type, [&]<uint32_t kType>() {
      rows_dot<kType, kM, 2>(rows, begin, end, codes, scales, v.cols, lane, tokens, acc);
    });
  } else {
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t r = i == 0 ? row0 : row1;
      if (i == 1 && !valid1) break;
      const uint8_t* const rows[1] = {v.data + r * v.stride};
      float one[1][kMaxTokens] = {};
      with_block_type(segment_type(v, r), [&]<uint32_t kType>() {
        rows_dot<kType, kM, 1>(rows, begin, end, codes, scales, v.cols, lane, tokens, one);
      });
#pragma unroll
      for (int m = 0; m < kMaxTokens; ++m) acc[i][m] = one[0][m];
    }
  }
  if constexpr (kSplit > 1) {
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
      for (int m = 0; m < kM; ++m) {
        const float sum = warp_sum(acc[i][m]);
        if (lane == 0) split_sums[part][i][m] = sum;
      }
    __syncthreads();
    if (threadIdx.x < 2 * kM) {
      const int i = static_cast<int>(threadIdx.x) / kM, m = static_cast<int>(threadIdx.x) % kM;
      if ((i == 0 || valid1) && m < tokens) {
        float y = 0.0f;
#pragma unroll
        for (int p = 0; p < kSplit; ++p) y += split_sums[p][i][m];
        store_result(y, m, i == 0 ? row0 : row1, v.rows, bias, out, accumulate);
      }
    }
  } else if constexpr (kSwiGlu) {
    store_swiglu<T, kM>(acc[0], acc[1], warp, f, lane, tokens, out);
  } else {
    store_row<T, kM>(acc[0], row0, v.rows, lane, tokens, bias, out, accumulate);
    if (valid1) store_row<T, kM>(acc[1], row1, v.rows, lane, tokens, bias, out, accumulate);
  }
}

// dst (N, K) of T = the weight dequantized: a thread per 32-element block.
template <typename T>
__global__ void dequantize_gguf_kernel(GgufView v, T* __restrict__ dst) {
  const int64_t blocks_per_row = v.cols / kBlock;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= v.rows * blocks_per_row) return;
  const int64_t row = i / blocks_per_row;
  const int b = static_cast<int>(i % blocks_per_row);
  const uint8_t* w = v.data + row * v.stride;
  WeightBlock blk;
  with_block_type(segment_type(v, row), [&]<uint32_t kType>() { blk = decode_block<kType>(w, b); });
  constexpr int kVec = kVec16<T>;
#pragma unroll
  for (int j = 0; j < kBlock / kVec; ++j) {
    float e[kVec];
#pragma unroll
    for (int t = 0; t < kVec; ++t) {
      const int i4 = (j * kVec + t) / 4;  // the code's word, 4 codes each
      const float c = int8_byte_as_float(static_cast<uint32_t>(blk.c[i4]),
                                         (j * kVec + t) % 4);  // the signed code, without an I2F
      e[t] = (i4 < 4 ? blk.s_lo : blk.s_hi) * c - blk.o;
    }
    store16_f32(dst + row * v.cols + int64_t{b} * kBlock + j * kVec, e);
  }
}

unsigned grid_for(int64_t threads, int per_block) {
  return static_cast<unsigned>((threads + per_block - 1) / per_block);
}

}  // namespace gguf

using namespace gguf;  // NOLINT(google-build-using-namespace): this file's kernels

bool gguf_operands_ok(const Tensor& x, const WeightRef& w) {
  return w.format == WeightFormat::kGguf && w.quantized_layout_ok() &&
         (x.dtype == DType::kBF16 || x.dtype == DType::kF16) && x.row_size() == w.cols() &&
         w.cols() % kBlock == 0 && aligned16(x.data) && aligned16(w.data.data) &&
         w.data.dim(1) % 16 == 0;
}

int64_t gguf_gemv_scratch_bytes(int64_t tokens, int64_t k) {
  return tokens * k + tokens * (k / kBlock) * static_cast<int64_t>(sizeof(float2)) + 256;
}

namespace gguf {

// The codes (M, K) and block scales (M, K / 32) in the scratch.
struct Q8Act {
  int8_t* codes;
  float2* scales;
};

Q8Act q8_act(void* scratch, int64_t m, int64_t k) {
  return {static_cast<int8_t*>(scratch),
          reinterpret_cast<float2*>(static_cast<char*>(scratch) + ((m * k + 255) / 256) * 256)};
}

// The GEMV (kSwiGlu: the SwiGLU form) on x already quantized in act, M <= kMaxTokens.
template <typename T, bool kSwiGlu>
void launch_gemv_q8(int64_t m, const WeightRef& w, const T* bias, T* out, bool accumulate,
                    const Q8Act& act, cudaStream_t stream, bool pdl) {
  const GgufView v = view_of(w);
  const int64_t warps = kSwiGlu ? v.rows / 2 : (v.rows + 1) / 2;  // two rows each
  const dim3 grid(grid_for(warps, kThreads / 32));
  // IB_GGUF_WIDE: fewer than 8,192 row pairs (qkv, o and down of an 8B model) split K across
  // a block's warps (off by default: 12.6 -> 15.5 us per call on the H200, bench/NOTES.md).
  const bool split = !kSwiGlu && gguf_wide() && warps < 8192;
  const auto launch = [&]<int kM>() {
    auto kernel = gemv_gguf_kernel<T, kM, kSwiGlu>;
    dim3 blocks = grid;
    if constexpr (!kSwiGlu) {
      if (split) {  // a block per row pair
        kernel = gemv_gguf_kernel<T, kM, false, kThreads / 32>;
        blocks = dim3(static_cast<unsigned>(warps));
      }
    }
    launch_kernel("gemv_gguf", pdl, kernel, blocks, dim3(kThreads), 0, stream, v,
                  static_cast<const int8_t*>(act.codes), static_cast<const float2*>(act.scales),
                  bias, out, accumulate, static_cast<int>(m));
  };
  switch (m) {
    case 1:
      return launch.template operator()<1>();
    case 2:
      return launch.template operator()<2>();
    case 3:
      return launch.template operator()<3>();
    case 4:
      return launch.template operator()<4>();
    default:
      return launch.template operator()<8>();
  }
}

void check_gemv_operands(const Tensor& x, const WeightRef& w, const Tensor* bias, const Tensor& out,
                         int64_t n_out, size_t scratch_bytes) {
  const int64_t m = x.rows(), k = x.row_size();
  IB_ASSERT(gguf_operands_ok(x, w) && m >= 1 && m <= kMaxTokens && out.dtype == x.dtype &&
                out.rows() == m && out.row_size() == n_out,
            "gemv_gguf: x (M <= 8, K) bf16/fp16, a kGguf weight (N, K), out (M, N) of x's dtype");
  IB_ASSERT(static_cast<int64_t>(scratch_bytes) >= gguf_gemv_scratch_bytes(m, k),
            "gemv_gguf: the activation scratch is too small");
  if (bias)
    IB_ASSERT(bias->dtype == x.dtype && bias->numel() == w.rows(), "gemv_gguf: bias (N) of x's");
}

}  // namespace gguf

namespace {
std::atomic<bool> g_gguf_wide{false};  // IB_GGUF_WIDE
}  // namespace

void set_gguf_wide(bool on) {
  g_gguf_wide.store(on, std::memory_order_relaxed);
}

bool gguf_wide() {
  return g_gguf_wide.load(std::memory_order_relaxed);
}

void launch_gemv_gguf(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                      bool accumulate, void* scratch, size_t scratch_bytes, cudaStream_t stream,
                      bool pdl) {
  check_gemv_operands(x, w, bias, out, w.rows(), scratch_bytes);
  const int64_t m = x.rows(), k = x.row_size();
  const Q8Act act = q8_act(scratch, m, k);
  const int64_t blocks = m * (k / kBlock);
  const auto typed = [&]<typename T>() {
    launch_kernel("gemv_gguf(quantize)", pdl, quantize_q8_blocks_kernel<T, false>,
                  dim3(grid_for(blocks, 128)), dim3(128), 0, stream, x.as<const T>(), act.codes,
                  act.scales, static_cast<T*>(nullptr), blocks);
    launch_gemv_q8<T, false>(m, w, bias ? bias->as<const T>() : nullptr, out.as<T>(), accumulate,
                             act, stream, pdl);
  };
  if (x.dtype == DType::kBF16) {
    typed.template operator()<bf16>();
  } else {
    typed.template operator()<f16>();
  }
  IB_CUDA_CHECK_LAUNCH("gemv_gguf");
}

void launch_rms_gemv_gguf(const Tensor& h, const Tensor& gain, float eps, const WeightRef& w,
                          const Tensor* bias, Tensor out, bool swiglu, void* scratch,
                          size_t scratch_bytes, cudaStream_t stream, bool pdl) {
  check_gemv_operands(h, w, bias, out, swiglu ? w.rows() / 2 : w.rows(), scratch_bytes);
  const int64_t m = h.rows(), k = h.row_size();
  IB_ASSERT(gain.dtype == h.dtype && gain.numel() == k && aligned16(gain.data) &&
                (!swiglu || (bias == nullptr && w.rows() % 2 == 0)),
            "rms_gemv_gguf: a gain (K) of h's dtype; the SwiGLU form without bias, 2F rows");
  const Q8Act act = q8_act(scratch, m, k);
  const auto typed = [&]<typename T>() {
    // A block per thread where K allows (bench/NOTES.md, "IB_GGUF_WIDE: measured": 4.9 -> 3.4 us
    // per call at K = 4,096), else the looping kernel.
    const bool wide = k <= int64_t{kBlock} * kNormThreads;
    launch_kernel("gemv_gguf(rms_q8)", pdl, wide ? rms_q8_wide_kernel<T> : rms_q8_kernel<T>,
                  dim3(static_cast<unsigned>(m)), dim3(kNormThreads), 0, stream, h.as<const T>(),
                  gain.as<const T>(), eps, act.codes, act.scales, k);
    const T* b = bias ? bias->as<const T>() : nullptr;
    if (swiglu) {
      launch_gemv_q8<T, true>(m, w, b, out.as<T>(), false, act, stream, pdl);
    } else {
      launch_gemv_q8<T, false>(m, w, b, out.as<T>(), false, act, stream, pdl);
    }
  };
  if (h.dtype == DType::kBF16) {
    typed.template operator()<bf16>();
  } else {
    typed.template operator()<f16>();
  }
  IB_CUDA_CHECK_LAUNCH("rms_gemv_gguf");
}

void launch_q8_round_trip(const Tensor& x, Tensor dst, cudaStream_t stream) {
  IB_ASSERT(x.dtype == dst.dtype && x.numel() == dst.numel() && x.row_size() % kBlock == 0 &&
                aligned16(x.data) && aligned16(dst.data) &&
                (x.dtype == DType::kBF16 || x.dtype == DType::kF16),
            "q8_round_trip: x and dst (M, K) bf16/fp16, K a multiple of 32");
  const int64_t blocks = x.numel() / kBlock;
  if (blocks == 0) return;
  if (x.dtype == DType::kBF16) {
    quantize_q8_blocks_kernel<bf16, true><<<grid_for(blocks, 128), 128, 0, stream>>>(
        x.as<const bf16>(), nullptr, nullptr, dst.as<bf16>(), blocks);
  } else {
    quantize_q8_blocks_kernel<f16, true><<<grid_for(blocks, 128), 128, 0, stream>>>(
        x.as<const f16>(), nullptr, nullptr, dst.as<f16>(), blocks);
  }
  IB_CUDA_CHECK_LAUNCH("q8_round_trip");
}

void launch_dequantize_gguf(const WeightRef& w, Tensor dst, cudaStream_t stream) {
  IB_ASSERT(w.format == WeightFormat::kGguf && w.quantized_layout_ok() && dst.rank == 2 &&
                dst.dim(0) == w.rows() && dst.dim(1) == w.cols() && aligned16(dst.data) &&
                (dst.dtype == DType::kBF16 || dst.dtype == DType::kF16),
            "dequantize_gguf: a kGguf weight (N, K) and dst (N, K) bf16/fp16");
  const int64_t blocks = w.rows() * (w.cols() / kBlock);
  if (blocks == 0) return;
  const GgufView v = view_of(w);
  if (dst.dtype == DType::kBF16) {
    dequantize_gguf_kernel<bf16><<<grid_for(blocks, 128), 128, 0, stream>>>(v, dst.as<bf16>());
  } else {
    dequantize_gguf_kernel<f16><<<grid_for(blocks, 128), 128, 0, stream>>>(v, dst.as<f16>());
  }
  IB_CUDA_CHECK_LAUNCH("dequantize_gguf");
}

}  // namespace ib::cuda
