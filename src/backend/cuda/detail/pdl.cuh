// Programmatic dependent launch (Hopper): a kernel launched with `pdl` may start while the
// kernel before it on the stream is finishing. Every kernel launched this way calls pdl_wait()
// before it touches memory the previous kernels write or read (only reads of constant data, the
// weights, may come first), and pdl_trigger() once it may let the next kernel start. Both are
// no-ops when the kernel was launched normally, and before sm_90.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/detail/carveout.h"
#include "backend/cuda/detail/check.h"

namespace ib::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_trigger() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialization when
// pdl is set. Launch errors are checked under op.
template <typename... Params, typename... Args>
void launch_kernel(const char* op, bool pdl, void (*kernel)(Params...), dim3 grid, dim3 block,
                   size_t smem, cudaStream_t stream, Args&&... args) {
  if (smem_carveout() >= 0) apply_smem_carveout(reinterpret_cast<const void*>(kernel));
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute[0].val.programmaticStreamSerializationAllowed = 1;
  config.attrs = attribute;
  config.numAttrs = pdl ? 1 : 0;
  IB_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), op);
}

}  // namespace ib::cuda
