// The quantized decode GEMVs of one token with x in each block's shared memory (gemv_kernel.cuh's
// kXShared), by two switches (backend/kernel_switches.h). Process-wide, like the other GEMV
// switches in kernels.h.
#pragma once

#include <cstdint>

namespace ib::cuda {

// IB_GEMV_FUSE_QUANT: the W8A8 GEMVs (FP8, INT8 W8A8) quantize x in each block instead of after
// a quantize kernel (default off).
void set_gemv_fuse_quant(bool on);
bool gemv_fuse_quant();
// IB_GEMV_STAGE_X: the GEMVs of 1 (the default): INT8 W8A16, 2: every quantized format (W8A8
// the quantize kernel's codes), 0: none, copy x into each block and read each step's x there.
void set_gemv_stage_x(int formats);
int gemv_stage_x();
// IB_GEMV_STAGE_NORM: the INT8 W8A16 and 4-bit GEMVs whose x is staged normalise it in each block
// (the RMSNorm kernel's arithmetic, detail/norm_row.cuh) instead of after a norm kernel (default
// on).
void set_gemv_stage_norm(bool on);
bool gemv_stage_norm();
// The GEMV launches with x in shared memory so far (the tests' proof that the form ran).
int64_t gemv_x_shared_launches();
// Those of them that normalised x in the block (IB_GEMV_STAGE_NORM).
int64_t gemv_x_norm_launches();

}  // namespace ib::cuda
