#include "backend/cuda/detail/lora_shrink.cuh"
namespace ib::cuda {
template <typename T, int V>
__global__ void __launch_bounds__(kLoraShrinkThreads)
    look_cur(const T* __restrict__ x, int64_t k, const int32_t* __restrict__ slot_ids,
             int64_t tokens, LoraGroupPtrs cur, int rank, int num_slots, float* u) {
  lora_shrink_block<T, V, 1>(x, k, slot_ids, tokens, cur, rank, num_slots, u, blockIdx.x,
                             blockIdx.y);
}
template <typename T, int V>
__global__ void __launch_bounds__(kLoraShrinkThreads)
    look_next(const T* __restrict__ x, int64_t k, const int32_t* __restrict__ slot_ids,
              int64_t tokens, LoraGroupPtrs next, LoraShrinkSecond<T> second, int rank,
              int num_slots, float* u_next) {
  lora_shrink_block<T, V, 1, false, true>(x, k, slot_ids, tokens, next, rank, num_slots, u_next,
                                          blockIdx.x, blockIdx.y, nullptr, 0.0f, nullptr, second);
}
template __global__ void look_cur<__nv_bfloat16, 8>(const __nv_bfloat16*, int64_t, const int32_t*,
                                                    int64_t, LoraGroupPtrs, int, int, float*);
template __global__ void look_next<__nv_bfloat16, 8>(const __nv_bfloat16*, int64_t, const int32_t*,
                                                     int64_t, LoraGroupPtrs,
                                                     LoraShrinkSecond<__nv_bfloat16>, int, int,
                                                     float*);
}  // namespace ib::cuda
