// FP8 E4M3 quantization per row (weights at load, activations before a cuBLASLt FP8 GEMM), as
// backend/weight.h defines it: scale = max|row| / 448 (1 for a zero row), q = e4m3(v * (448 /
// max|row|)) rounded to nearest even with saturation (cvt.rn.satfinite, the CPU's
// f32_to_f8e4m3_bits).
#include <cuda_fp8.h>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/pdl.cuh"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: the row's max magnitude, then every element converted. kRms: the row is
// h of rms_norm(h) * gain: q = e4m3(h * gain * 448 / max |h * gain|) and the scale
// max |h * gain| / 448 / rms(h), which is the quantization of rms_norm(h) * gain up to rounding.
template <typename T, bool kRms>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_fp8_kernel(const T* __restrict__ src, const T* __restrict__ gain, float eps,
                             uint8_t* __restrict__ dst, float* __restrict__ scales, int64_t k) {
  __shared__ float scratch[32];
  const T* row = src + blockIdx.x * k;
  uint8_t* q = dst + blockIdx.x * k;
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
  const float inv = amax == 0.0f ? 0.0f : kF8E4M3Max / amax;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) {
    q[i] = __nv_cvt_float_to_fp8(value(i) * inv, __NV_SATFINITE, __NV_E4M3);
  }
  float scale = amax == 0.0f ? 1.0f : amax / kF8E4M3Max;
  if constexpr (kRms) {
    ss = block_sum(ss, scratch);
    scale *= rsqrtf(ss / static_cast<float>(k) + eps);
  }
  if (threadIdx.x == 0) scales[blockIdx.x] = scale;
}

}  // namespace

void launch_quantize_rows_fp8(const Tensor& src, Tensor dst, Tensor scales, cudaStream_t stream) {
  launch_quantize_rms_rows_fp8(src, nullptr, 0.0f, false, dst, scales, stream, false);
}

void launch_quantize_rms_rows_fp8(const Tensor& src, const Tensor* gain, float eps, bool rms,
                                  Tensor dst, Tensor scales, cudaStream_t stream, bool pdl) {
  IB_ASSERT(dst.dtype == DType::kF8E4M3 && scales.dtype == DType::kF32 &&
                dst.numel() == src.numel() && scales.numel() == src.rows(),
            "quantize_rows_fp8: dst (N, K) fp8_e4m3 and scales f32 (N) for src (N, K)");
  if (gain) {
    IB_ASSERT(gain->dtype == src.dtype && gain->numel() == src.row_size(),
              "quantize_rows_fp8: gain (K) of src's dtype");
  }
  const int64_t n = src.rows();
  const int64_t k = src.row_size();
  if (n == 0) return;
  IB_DISPATCH_FLOAT(src.dtype, T, {
    const T* g = gain ? gain->as<const T>() : nullptr;
    const auto kernel =
        rms ? quantize_rows_fp8_kernel<T, true> : quantize_rows_fp8_kernel<T, false>;
    launch_kernel("quantize_rows_fp8", pdl, kernel, dim3(static_cast<unsigned>(n)), dim3(kThreads),
                  0, stream, src.as<const T>(), g, eps, dst.as<uint8_t>(), scales.as<float>(), k);
  });
}

}  // namespace ib::cuda
