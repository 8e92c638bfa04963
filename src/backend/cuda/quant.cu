// Quantization per row (weights at load, activations before a GEMV or GEMM), as
// backend/weight.h defines it. FP8 E4M3: scale = max|row| / 448 (1 for a zero row),
// q = e4m3(v * (448 / max|row|)) rounded to nearest even with saturation (cvt.rn.satfinite, the
// CPU's f32_to_f8e4m3_bits). INT8: scale = max|row| / 127, q = clamp(rne(v * (127 / max|row|)),
// -127, 127) (the CPU's quantize_int8).
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kInt8Max = 127.0f;

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
  static constexpr float kMax = kInt8Max;
  __device__ static int8_t of(float v) {
    return static_cast<int8_t>(max(-127, min(127, __float2int_rn(v))));
  }
};

// One block per row: the row's max magnitude, then every element converted. kRms: the row is
// h of rms_norm(h) * gain: q = code(h * gain * kMax / max |h * gain|) and the scale
// max |h * gain| / kMax / rms(h), which is the quantization of rms_norm(h) * gain up to rounding.
template <typename T, typename TQ, bool kRms>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_kernel(const T* __restrict__ src, const T* __restrict__ gain, float eps,
                         TQ* __restrict__ dst, float* __restrict__ scales, int64_t k) {
  __shared__ float scratch[32];
  const T* row = src + blockIdx.x * k;
  TQ* q = dst + blockIdx.x * k;
  pdl_wait();
  pdl_trigger();
  const auto value = [&](int64_t i) {
    return gain ? to_f32(row[i]) * to_f32(gain[i]) : to_f32(row[i]);
  };
  float amax = 0.0f, ss = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) {
    amax = fmaxf(amax, fabsf(value(i)));
    if constexpr (kRms) ss += to_f32(row[i]) * to_f32(row[i]);
  }
  amax = block_max(amax, scratch);
  constexpr float kMax = QuantCode<TQ>::kMax;
  const float inv = amax == 0.0f ? 0.0f : kMax / amax;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) q[i] = QuantCode<TQ>::of(value(i) * inv);
  float scale = amax == 0.0f ? 1.0f : amax / kMax;
  if constexpr (kRms) {
    ss = block_sum(ss, scratch);
    scale *= rsqrtf(ss / static_cast<float>(k) + eps);
  }
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
}

template <typename T, typename TQ>
void launch_typed(const Tensor& src, const Tensor* gain, float eps, bool rms, Tensor dst,
                  Tensor scales, cudaStream_t stream, bool pdl) {
  const T* g = gain ? gain->as<const T>() : nullptr;
  const auto kernel = rms ? quantize_rows_kernel<T, TQ, true> : quantize_rows_kernel<T, TQ, false>;
  launch_kernel("quantize_rows", pdl, kernel, dim3(static_cast<unsigned>(src.rows())),
                dim3(kThreads), 0, stream, src.as<const T>(), g, eps, dst.as<TQ>(),
                scales.as<float>(), src.row_size());
}

template <typename T>
__global__ void dequantize_int8_kernel(const int8_t* __restrict__ data,
                                       const float* __restrict__ scales, T* __restrict__ dst,
                                       int64_t n, int64_t k) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n * k;
       i += int64_t{gridDim.x} * blockDim.x) {
    dst[i] = from_f32<T>(static_cast<float>(data[i]) * scales[i / k]);
  }
}

template <typename T>
__global__ void dequantize_int32_kernel(const int32_t* __restrict__ acc,
                                        const float* __restrict__ x_scales,
                                        const float* __restrict__ w_scales,
                                        const T* __restrict__ bias, T* __restrict__ out, int64_t m,
                                        int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < m * n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t col = i % n;
    float y = static_cast<float>(acc[i]) * x_scales[i / n] * w_scales[col];
    if (bias) y += to_f32(bias[col]);
    out[i] = from_f32<T>(y);
  }
}

unsigned grid_of(int64_t elements) {
  return static_cast<unsigned>(std::min<int64_t>((elements + kThreads - 1) / kThreads, 65535));
}

}  // namespace

void launch_dequantize_int8(const WeightRef& w, Tensor dst, cudaStream_t stream) {
  IB_ASSERT(w.format != WeightFormat::kDense && w.quantized_layout_ok() &&
                w.data.dtype == DType::kI8 && dst.numel() == w.data.numel() &&
                (dst.dtype == DType::kBF16 || dst.dtype == DType::kF16),
            "dequantize_int8: an int8 weight (N, K) and dst (N, K) bf16/fp16");
  const int64_t n = w.data.dim(0), k = w.data.dim(1);
  if (n * k == 0) return;
  IB_DISPATCH_FLOAT(dst.dtype, T, {
    dequantize_int8_kernel<T><<<grid_of(n * k), kThreads, 0, stream>>>(
        w.data.as<const int8_t>(), w.scales.as<const float>(), dst.as<T>(), n, k);
  });
  IB_CUDA_CHECK_LAUNCH("dequantize_int8");
}

void launch_dequantize_int32(const Tensor& acc, const Tensor& x_scales, const Tensor& w_scales,
                             const Tensor* bias, Tensor out, cudaStream_t stream) {
  const int64_t m = out.rows(), n = out.row_size();
  IB_ASSERT(acc.dtype == DType::kI32 && acc.numel() == m * n && x_scales.numel() >= m &&
                w_scales.numel() == n && (bias == nullptr || bias->dtype == out.dtype),
            "dequantize_int32: acc (M, N) int32, x_scales (M), w_scales (N), bias of out's dtype");
  if (m * n == 0) return;
  IB_DISPATCH_FLOAT(out.dtype, T, {
    dequantize_int32_kernel<T><<<grid_of(m * n), kThreads, 0, stream>>>(
        acc.as<const int32_t>(), x_scales.as<const float>(), w_scales.as<const float>(),
        bias ? bias->as<const T>() : nullptr, out.as<T>(), m, n);
  });
  IB_CUDA_CHECK_LAUNCH("dequantize_int32");
}

void launch_quantize_rows(const Tensor& src, Tensor dst, Tensor scales, cudaStream_t stream) {
  launch_quantize_rms_rows(src, nullptr, 0.0f, false, dst, scales, stream, false);
}

void launch_quantize_rms_rows(const Tensor& src, const Tensor* gain, float eps, bool rms,
                              Tensor dst, Tensor scales, cudaStream_t stream, bool pdl) {
  IB_ASSERT((dst.dtype == DType::kF8E4M3 || dst.dtype == DType::kI8) &&
                scales.dtype == DType::kF32 && dst.numel() == src.numel() &&
                scales.numel() == src.rows(),
            "quantize_rows: dst (N, K) fp8_e4m3 or int8 and scales f32 (N) for src (N, K)");
  if (gain) {
    IB_ASSERT(gain->dtype == src.dtype && gain->numel() == src.row_size(),
              "quantize_rows: gain (K) of src's dtype");
  }
  if (src.rows() == 0) return;
  IB_DISPATCH_FLOAT(src.dtype, T, {
    if (dst.dtype == DType::kI8) {
      launch_typed<T, int8_t>(src, gain, eps, rms, dst, scales, stream, pdl);
    } else {
      launch_typed<T, uint8_t>(src, gain, eps, rms, dst, scales, stream, pdl);
    }
  });
}

}  // namespace ib::cuda
