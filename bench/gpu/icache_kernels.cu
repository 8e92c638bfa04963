// Straight-line code kernels for the icache section (icache_kernels.h).
#include "icache_kernels.h"

#include "backend/cuda/detail/check.h"

namespace ib::bench {
namespace {

constexpr int kThreads = 128;

// kRounds x 8 FMAs, each round's 8 independent of each other (8 chains that read their
// neighbour's last value), every constant distinct so nothing folds or repeats; kSalt makes two
// instantiations of one size different code. The sink is written only on an impossible sum.
template <int kRounds, int kSalt>
__global__ void __launch_bounds__(kThreads) code_kernel(float* sink, float seed, int reps) {
  float a[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) a[j] = seed + static_cast<float>(threadIdx.x * 8 + j);
  for (int r = 0; r < reps; ++r) {
#pragma unroll
    for (int i = 0; i < kRounds; ++i) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float c = 1.0f + static_cast<float>((i * 8 + j) * 7 + kSalt) * 1.0e-7f;
        a[j] = fmaf(a[j], c, a[(j + 1) & 7]);
      }
    }
  }
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < 8; ++j) s += a[j];
  if (s == 1234.5f) sink[threadIdx.x] = s;
}

constexpr int kRounds[] = {16, 32, 64, 128, 256, 512};
using Kernel = void (*)(float*, float, int);
constexpr Kernel kKernels[] = {code_kernel<16, 0>,  code_kernel<32, 0>,  code_kernel<64, 0>,
                               code_kernel<128, 0>, code_kernel<256, 0>, code_kernel<512, 0>};
static_assert(sizeof(kRounds) / sizeof(kRounds[0]) == sizeof(kKernels) / sizeof(kKernels[0]));

}  // namespace

int code_kernel_count() {
  return static_cast<int>(sizeof(kRounds) / sizeof(kRounds[0]));
}
int code_kernel_rounds(int index) {
  return kRounds[index];
}

void launch_code_kernel(int index, int blocks, int reps, float* sink, cudaStream_t stream) {
  kKernels[index]<<<blocks, kThreads, 0, stream>>>(sink, 1.0f, reps);
  IB_CUDA_CHECK_LAUNCH("icache code kernel");
}

void launch_code_evictor(int blocks, float* sink, cudaStream_t stream) {
  code_kernel<1024, 1><<<blocks, kThreads, 0, stream>>>(sink, 1.0f, 1);
  IB_CUDA_CHECK_LAUNCH("icache evictor");
}

}  // namespace ib::bench
