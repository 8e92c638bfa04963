// FP8 E4M3 quantization per row (weights at load, activations before a cuBLASLt FP8 GEMM), as
// backend/weight.h defines it: scale = max|row| / 448 (1 for a zero row), q = e4m3(v * (448 /
// max|row|)) rounded to nearest even with saturation (cvt.rn.satfinite, the CPU's
// f32_to_f8e4m3_bits).
#include <cuda_fp8.h>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;

// One block per row: the row's max magnitude, then every element converted.
template <typename T>
__global__ void __launch_bounds__(kThreads)
    quantize_rows_fp8_kernel(const T* __restrict__ src, uint8_t* __restrict__ dst,
                             float* __restrict__ scales, int64_t k) {
  __shared__ float scratch[32];
  const T* row = src + blockIdx.x * k;
  uint8_t* q = dst + blockIdx.x * k;
  float amax = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) amax = fmaxf(amax, fabsf(to_f32(row[i])));
  amax = block_max(amax, scratch);
  const float inv = amax == 0.0f ? 0.0f : kF8E4M3Max / amax;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) {
    q[i] = __nv_cvt_float_to_fp8(to_f32(row[i]) * inv, __NV_SATFINITE, __NV_E4M3);
  }
  if (threadIdx.x == 0) scales[blockIdx.x] = amax == 0.0f ? 1.0f : amax / kF8E4M3Max;
}

}  // namespace

void launch_quantize_rows_fp8(const Tensor& src, Tensor dst, Tensor scales, cudaStream_t stream) {
  IB_ASSERT(dst.dtype == DType::kF8E4M3 && scales.dtype == DType::kF32 &&
                dst.numel() == src.numel() && scales.numel() == src.rows(),
            "quantize_rows_fp8: dst (N, K) fp8_e4m3 and scales f32 (N) for src (N, K)");
  const int64_t n = src.rows();
  const int64_t k = src.row_size();
  if (n == 0) return;
  IB_DISPATCH_FLOAT(src.dtype, T, {
    quantize_rows_fp8_kernel<T><<<static_cast<unsigned>(n), kThreads, 0, stream>>>(
        src.as<const T>(), dst.as<uint8_t>(), scales.as<float>(), k);
  });
  IB_CUDA_CHECK_LAUNCH("quantize_rows_fp8");
}

}  // namespace ib::cuda
