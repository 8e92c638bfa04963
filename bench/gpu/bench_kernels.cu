#include "bench_kernels.h"

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/gemv_kernel.cuh"

namespace ib::bench {
namespace {

constexpr int kThreads = 512;

__global__ void __launch_bounds__(kThreads) copy_kernel(const uint4* src, uint4* dst, size_t n) {
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads)
    dst[i] = src[i];
}

__global__ void __launch_bounds__(kThreads)
    read_kernel(const uint4* src, size_t n, unsigned* sink) {
  unsigned acc = 0;
  for (size_t i = blockIdx.x * size_t{kThreads} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * kThreads) {
    const uint4 v = cuda::load_stream16(src + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; practically never taken
}

template <typename TOut, int kWarps, int kUnroll, bool kAdjacent>
void run(const Tensor& x, const Tensor& w, Tensor out, cudaStream_t stream) {
  const int m = static_cast<int>(x.rows()), n = static_cast<int>(w.dim(0)),
            k = static_cast<int>(w.dim(1));
  const unsigned blocks = static_cast<unsigned>((n + cuda::kGemvRows - 1) / cuda::kGemvRows);
  cuda::gemv_kernel<cuda::bf16, TOut, 1, kWarps, kUnroll, kAdjacent>
      <<<blocks, kWarps * 32, 0, stream>>>(x.as<cuda::bf16>(), w.as<cuda::bf16>(), nullptr,
                                           out.as<TOut>(), m, n, k);
}

template <typename TOut>
void run_variant(int v, const Tensor& x, const Tensor& w, Tensor out, cudaStream_t stream) {
  switch (v) {
    case 0:
      run<TOut, 8, 2, false>(x, w, out, stream);
      break;
    case 1:
      run<TOut, 8, 4, false>(x, w, out, stream);
      break;
    case 2:
      run<TOut, 8, 4, true>(x, w, out, stream);
      break;
    case 3:
      run<TOut, 16, 2, true>(x, w, out, stream);
      break;
    case 4:
      run<TOut, 16, 4, true>(x, w, out, stream);
      break;
    default:
      run<TOut, 4, 4, true>(x, w, out, stream);
      break;
  }
}

const char* const kNames[] = {"w8u2", "w8u4", "w8u4adj", "w16u2adj", "w16u4adj", "w4u4adj"};

}  // namespace

void launch_copy(const void* src, void* dst, size_t bytes, int num_sms, cudaStream_t stream) {
  copy_kernel<<<static_cast<unsigned>(num_sms * 4), kThreads, 0, stream>>>(
      static_cast<const uint4*>(src), static_cast<uint4*>(dst), bytes / 16);
  IB_CUDA_CHECK_LAUNCH("bench copy");
}

void launch_read(const void* src, size_t bytes, unsigned* sink, int num_sms, cudaStream_t stream) {
  read_kernel<<<static_cast<unsigned>(num_sms * 4), kThreads, 0, stream>>>(
      static_cast<const uint4*>(src), bytes / 16, sink);
  IB_CUDA_CHECK_LAUNCH("bench read");
}

int gemv_variant_count() {
  return static_cast<int>(sizeof(kNames) / sizeof(kNames[0]));
}
const char* gemv_variant_name(int variant) {
  return kNames[variant];
}

void launch_gemv_variant(int variant, const Tensor& x, const Tensor& w, Tensor out,
                         cudaStream_t stream) {
  if (out.dtype == DType::kF32) {
    run_variant<float>(variant, x, w, out, stream);
  } else {
    run_variant<cuda::bf16>(variant, x, w, out, stream);
  }
  IB_CUDA_CHECK_LAUNCH("bench gemv variant");
}

}  // namespace ib::bench
