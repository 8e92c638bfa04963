// IB_SMEM_CARVEOUT (launch.cu): the shared-memory carve-out preference, in percent of the SM's
// shared memory, that launch_kernel (pdl.cuh) sets on each kernel it launches (-1: none, the
// driver's choice). One preference for every kernel of a step, so that the driver need not change
// an SM's L1 / shared split between neighbouring kernels (a hint: results do not change).
// Process-wide, like the GEMV switches.
#pragma once

namespace ib::cuda {

void set_smem_carveout(int percent);
int smem_carveout();
// Sets the current preference on kernel (a __global__ function), once per kernel and value.
void apply_smem_carveout(const void* kernel);

}  // namespace ib::cuda
