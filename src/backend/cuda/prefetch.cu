// L2 prefetch of a weight the next op reads, run beside a latency-bound op (the decode
// attention) that leaves the memory bus idle (bench/NOTES.md, phase 5).
#include <algorithm>

#include "backend/cuda/detail/check.h"
#include "backend/cuda/detail/device_math.cuh"
#include "backend/cuda/detail/kernels.h"

namespace ib::cuda {
namespace {

constexpr int kThreads = 256;
constexpr size_t kLineBytes = 128;
constexpr size_t kBulkBytes = 4096;  // one cp.async.bulk prefetch per thread and step

// kMode 1: prefetch.global.L2::evict_last per 128-byte line; 2: prefetch.global.L2 (normal
// priority); 3: cp.async.bulk.prefetch.L2 of 4 KiB per instruction (sm_90; mode 2 below it).
template <int kMode>
__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const char* p, size_t bytes) {
  const size_t stride = static_cast<size_t>(gridDim.x) * kThreads;
  const size_t first = static_cast<size_t>(blockIdx.x) * kThreads + threadIdx.x;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  constexpr bool kBulk = kMode == 3;
#else
  constexpr bool kBulk = false;
#endif
  if constexpr (kBulk) {
    for (size_t off = first * kBulkBytes; off < bytes; off += stride * kBulkBytes) {
      const size_t left = bytes - off;
      const auto n = static_cast<unsigned>((left < kBulkBytes ? left : kBulkBytes) / 16 * 16);
      if (n > 0)
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(n)
                     : "memory");
    }
  } else {
    for (size_t off = first * kLineBytes; off < bytes; off += stride * kLineBytes) {
      if constexpr (kMode == 1) {
        asm volatile("prefetch.global.L2::evict_last [%0];" ::"l"(p + off));
      } else {
        prefetch_l2(p + off);
      }
    }
  }
}

}  // namespace

void launch_l2_prefetch(const void* data, size_t bytes, int mode, int blocks, cudaStream_t stream) {
  if (bytes == 0 || mode <= 0) return;
  const auto* p = static_cast<const char*>(data);
  const dim3 grid(static_cast<unsigned>(std::max(blocks, 1)));
  switch (mode) {
    case 1:
      l2_prefetch_kernel<1><<<grid, kThreads, 0, stream>>>(p, bytes);
      break;
    case 2:
      l2_prefetch_kernel<2><<<grid, kThreads, 0, stream>>>(p, bytes);
      break;
    default:
      l2_prefetch_kernel<3><<<grid, kThreads, 0, stream>>>(p, bytes);
      break;
  }
  IB_CUDA_CHECK_LAUNCH("l2_prefetch");
}

}  // namespace ib::cuda
