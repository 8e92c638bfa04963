// Kernels of straight-line code for the op benchmark's icache section (ops_bench_icache.cpp):
// what running code a block has not run before costs, against the same code warm.
#pragma once

#include <cuda_runtime_api.h>

namespace ib::bench {

// The code kernels' sizes: each is rounds x 8 independent FMAs with distinct constants, unrolled
// (its SASS bytes: python3 bench/gpu/ptxas_regs.py --sizes bench/gpu/icache_kernels.cu).
int code_kernel_count();
int code_kernel_rounds(int index);
// Kernel `index` on `blocks` blocks of 4 warps (one a scheduler), its body run `reps` times.
void launch_code_kernel(int index, int blocks, int reps, float* sink, cudaStream_t stream);
// The evictor: straight-line code larger than an SM's instruction caches, run once.
void launch_code_evictor(int blocks, float* sink, cudaStream_t stream);

}  // namespace ib::bench
