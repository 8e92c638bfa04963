// Flags between two grids that run at once, where the consumer does not wait for the producer's
// grid to finish (griddepcontrol.wait) but for a word it writes: the producer's threads store
// their results, fence, meet at a barrier, and one thread releases the word; one thread of each
// consumer block acquires it (an acquire at GPU scope also discards the SM's L1 lines, so the
// block's later loads see the producer's stores), then the block meets at a barrier.
#pragma once

#include <cuda_runtime.h>

namespace ib::cuda {

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ void red_release_add_gpu(unsigned* p, unsigned v) {
  asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// The calling thread spins until *p >= target (acquire), backing off between reads.
__device__ __forceinline__ void spin_until_at_least(const unsigned* p, unsigned target) {
  while (ld_acquire_gpu(p) < target) __nanosleep(32);
}

// Thread 0 of the block waits until *p >= target, then the whole block (a barrier: every thread
// must call it).
__device__ __forceinline__ void block_wait_flag(const unsigned* p, unsigned target) {
  if (threadIdx.x == 0) spin_until_at_least(p, target);
  __syncthreads();
}

// A producer block's stores published and the block counted into *count (every thread calls it:
// a fence, the block's barrier, one release by thread 0).
__device__ __forceinline__ void block_count_done(unsigned* count) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) red_release_add_gpu(count, 1u);
}

// A consumer grid's end, called by one thread of each block once the block has read the words
// for the last time: the last block to call it (counted in *done) sets words[0, n) back to 0
// (done among them).
__device__ __forceinline__ void grid_reset_when_last(unsigned* done, unsigned* words, int n) {
  __threadfence();
  if (atomicAdd(done, 1u) == gridDim.x - 1) {
    for (int i = 0; i < n; ++i) atomicExch(words + i, 0u);
  }
}

}  // namespace ib::cuda
