#include "backend/cuda/detail/split_kv_kernel.cuh"
namespace ib::cuda {
template __global__ void split_kv_lean_kernel<__nv_bfloat16, 128, 4, 8, false>(SplitParams);
template __global__ void split_kv_lean_kernel<__nv_bfloat16, 128, 1, 8, false>(SplitParams);
}  // namespace ib::cuda
