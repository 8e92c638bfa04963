// The 4-bit formats' load-time quantization and dequantization (backend/weight.h: kInt4W4A16,
// kNf4). The CPU backend is the oracle of each (cuda_quant_test).
#include <cuda_fp16.h>

#include <algorithm>
#include <iterator>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;

// bitsandbytes' NF4 levels, passed by value (no constant-memory upload: these kernels may run
// inside a captured graph).
struct Nf4Table {
  float v[16];
};

Nf4Table nf4_table() {
  Nf4Table t;
  std::copy(std::begin(kNf4Levels), std::end(kNf4Levels), t.v);
  return t;
}

__device__ __forceinline__ float rne(float v) {
  return rintf(v);  // round half to even (the default rounding mode)
}

// dst (N, K) in the weight's original column order: act-order columns go back to input_perm[k].
// A thread takes 8 bytes (16 codes of one group: group sizes are multiples of 16) and, without a
// permutation, writes its 16 values in two 16-byte stores; 32-bit index math (N * K / 16 < 2^32,
// checked by the launcher), one division by the row's chunks per 16 values.
template <typename T>
__global__ void dequantize_4bit_kernel(const uint2* __restrict__ data,
                                       const void* __restrict__ scales,
                                       const uint8_t* __restrict__ zeros,
                                       const int32_t* __restrict__ perm, T* __restrict__ dst,
                                       uint32_t n, uint32_t k, uint32_t group, bool nf4,
                                       Nf4Table levels) {
  const uint32_t row_chunks = k / 16, groups = k / group, chunks = n * row_chunks;
  for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < chunks;
       i += gridDim.x * blockDim.x) {
    const uint32_t row = i / row_chunks, col = (i - row * row_chunks) * 16;
    const uint32_t g = row * groups + col / group;
    const uint2 word = __ldg(data + i);
    float s = 0.0f, offset = 0.0f;
    if (nf4) {
      s = static_cast<const float*>(scales)[g];
    } else {
      s = __half2float(static_cast<const __half*>(scales)[g]);
      offset = -(128.0f + static_cast<float>(zeros[g])) * s;
    }
    float v[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      // Byte j / 2; NF4 puts the even k in the high nibble, the others in the low one.
      const uint32_t byte = ((j < 8 ? word.x : word.y) >> (8 * ((j / 2) & 3))) & 0xFFu;
      const bool high = ((j & 1) != 0) != nf4;
      const uint32_t q = high ? byte >> 4 : byte & 0xFu;
      v[j] = nf4 ? levels.v[q] * s : int4_code_value(q << 16, s, offset);
    }
    T* out = dst + size_t{row} * k;
    if (perm == nullptr) {
      uint4 packed[2];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        packed[h].x = pack2_from_f32<T>(v[8 * h + 0], v[8 * h + 1]);
        packed[h].y = pack2_from_f32<T>(v[8 * h + 2], v[8 * h + 3]);
        packed[h].z = pack2_from_f32<T>(v[8 * h + 4], v[8 * h + 5]);
        packed[h].w = pack2_from_f32<T>(v[8 * h + 6], v[8 * h + 7]);
      }
      *reinterpret_cast<uint4*>(out + col) = packed[0];
      *reinterpret_cast<uint4*>(out + col + 8) = packed[1];
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) out[perm[col + j]] = from_f32<T>(v[j]);
    }
  }
}

// One warp per (row, group) of kInt4W4A16, as weight.h defines the load-time quantization.
template <typename T>
__global__ void quantize_int4_kernel(const T* __restrict__ src, uint8_t* __restrict__ data,
                                     __half* __restrict__ scales, uint8_t* __restrict__ zeros,
                                     int64_t n, int64_t k, int group, bool symmetric) {
  const int64_t groups = k / group;
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= n * groups) return;
  const int64_t row = warp / groups, g = warp % groups;
  const T* w = src + row * k + g * group;
  float lo = INFINITY, hi = -INFINITY, amax = 0.0f;
  for (int i = lane; i < group; i += 32) {
    const float v = to_f32(w[i]);
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
    amax = fmaxf(amax, fabsf(v));
  }
  lo = -warp_max(-lo);
  hi = warp_max(hi);
  amax = warp_max(amax);
  float s;
  int z;
  if (symmetric) {
    s = amax > 0.0f ? amax / 7.5f : 1.0f;
  } else {
    s = fmaxf(hi - lo, 1e-5f) / 15.0f;
  }
  const __half s_half = __float2half_rn(s);
  s = __half2float(s_half);
  z = symmetric ? 8 : static_cast<int>(fminf(fmaxf(rne(-lo / s), 0.0f), 15.0f));
  if (lane == 0) {
    scales[row * groups + g] = s_half;
    zeros[row * groups + g] = static_cast<uint8_t>(z);
  }
  uint8_t* out = data + row * (k / 2) + g * (group / 2);
  for (int j = lane; j < group / 2; j += 32) {
    int q[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float v = to_f32(w[2 * j + h]);
      // A scale that rounds to f16 zero stores the zero point (w = 0), as weight.h says.
      q[h] = s == 0.0f
                 ? z
                 : static_cast<int>(fminf(fmaxf(rne(v / s) + static_cast<float>(z), 0.0f), 15.0f));
    }
    out[j] = static_cast<uint8_t>(q[0] | (q[1] << 4));
  }
}

// The NF4 code nearest v (ties to the lower code).
__device__ __forceinline__ int nf4_code(float v, const Nf4Table& levels) {
  int best = 0;
  float best_d = fabsf(v - levels.v[0]);
  for (int c = 1; c < 16; ++c) {
    const float d = fabsf(v - levels.v[c]);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

// One warp per block of 64 of kNf4.
template <typename T>
__global__ void quantize_nf4_kernel(const T* __restrict__ src, uint8_t* __restrict__ data,
                                    float* __restrict__ absmax_out, int64_t n, int64_t k, int group,
                                    Nf4Table levels) {
  const int64_t groups = k / group;
  const int64_t warp = (blockIdx.x * int64_t{blockDim.x} + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= n * groups) return;
  const int64_t row = warp / groups, g = warp % groups;
  const T* w = src + row * k + g * group;
  float amax = 0.0f;
  for (int i = lane; i < group; i += 32) amax = fmaxf(amax, fabsf(to_f32(w[i])));
  amax = warp_max(amax);
  const float absmax = amax > 0.0f ? amax : 1.0f;
  if (lane == 0) absmax_out[row * groups + g] = absmax;
  uint8_t* out = data + row * (k / 2) + g * (group / 2);
  for (int j = lane; j < group / 2; j += 32) {
    const int hi = nf4_code(to_f32(w[2 * j]) / absmax, levels);
    const int lo = nf4_code(to_f32(w[2 * j + 1]) / absmax, levels);
    out[j] = static_cast<uint8_t>((hi << 4) | lo);
  }
}

unsigned grid_of(int64_t threads) {
  return static_cast<unsigned>(std::min<int64_t>((threads + kThreads - 1) / kThreads, 1 << 20));
}

}  // namespace

void launch_dequantize_4bit(const WeightRef& w, Tensor dst, cudaStream_t stream) {
  IB_ASSERT(is_4bit(w.format) && w.quantized_layout_ok() && dst.rank == 2 &&
                dst.dim(0) == w.rows() && dst.dim(1) == w.cols() &&
                (dst.dtype == DType::kBF16 || dst.dtype == DType::kF16),
            "dequantize_4bit: a 4-bit weight (N, K) and dst (N, K) bf16/fp16");
  const int64_t n = w.rows(), k = w.cols();
  if (n * k == 0) return;
  const bool nf4 = w.format == WeightFormat::kNf4;
  const int32_t* perm = w.input_perm.empty() ? nullptr : w.input_perm.as<const int32_t>();
  IB_ASSERT(aligned16(dst.data) && reinterpret_cast<uintptr_t>(w.data.data) % 8 == 0 &&
                k % 16 == 0 && w.group_size % 16 == 0 && n * (k / 16) < (int64_t{1} << 32),
            "dequantize_4bit: a 16-byte aligned dst, 8-byte aligned codes, K and the group size "
            "multiples of 16, N * K / 16 < 2^32");
  const auto launch = [&]<typename T>() {
    dequantize_4bit_kernel<T><<<grid_of(n * k / 16), kThreads, 0, stream>>>(
        static_cast<const uint2*>(w.data.data), w.scales.data,
        nf4 ? nullptr : w.zeros.as<const uint8_t>(), perm, dst.as<T>(), static_cast<uint32_t>(n),
        static_cast<uint32_t>(k), static_cast<uint32_t>(w.group_size), nf4, nf4_table());
  };
  if (dst.dtype == DType::kBF16) {
    launch.template operator()<bf16>();
  } else {
    launch.template operator()<f16>();
  }
  IB_CUDA_CHECK_LAUNCH("dequantize_4bit");
}

void launch_quantize_4bit(const Tensor& dense, const WeightRef& out, bool symmetric,
                          cudaStream_t stream) {
  IB_ASSERT(is_4bit(out.format) && out.quantized_layout_ok() && out.input_perm.empty() &&
                dense.rank == 2 && dense.rows() == out.rows() && dense.row_size() == out.cols() &&
                (dense.dtype == DType::kBF16 || dense.dtype == DType::kF16),
            "quantize_4bit: dense (N, K) bf16/fp16 into a 4-bit weight (N, K) without act-order");
  const int64_t n = out.rows(), k = out.cols();
  const int64_t warps = n * (k / out.group_size);
  if (warps == 0) return;
  if (out.format == WeightFormat::kNf4) {
    IB_DISPATCH_FLOAT(dense.dtype, T, {
      quantize_nf4_kernel<T><<<grid_of(warps * 32), kThreads, 0, stream>>>(
          dense.as<const T>(), out.data.as<uint8_t>(), out.scales.as<float>(), n, k, out.group_size,
          nf4_table());
    });
  } else {
    IB_DISPATCH_FLOAT(dense.dtype, T, {
      quantize_int4_kernel<T><<<grid_of(warps * 32), kThreads, 0, stream>>>(
          dense.as<const T>(), out.data.as<uint8_t>(), static_cast<__half*>(out.scales.data),
          out.zeros.as<uint8_t>(), n, k, out.group_size, symmetric);
    });
  }
  IB_CUDA_CHECK_LAUNCH("quantize_4bit");
}

}  // namespace ib::cuda
