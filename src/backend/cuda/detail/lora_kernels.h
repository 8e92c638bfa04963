// Host-side launchers of lora.cu, the LoRA kernels (backend/ops.h, LoraOps). Like kernels.h's:
// they enqueue on `stream`, never synchronize and never allocate (graph-safe).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace ib::cuda {

// The targets of one grouped update (LoraOps::lora_apply_group), passed to the kernels by value:
// each target's A (S, R, K) and B (S, N, R) stacks in x's dtype, its N and its first output row.
struct LoraGroupPtrs {
  const void* a[LoraOps::kMaxLoraGroup] = {};
  const void* b[LoraOps::kMaxLoraGroup] = {};
  int64_t n[LoraOps::kMaxLoraGroup] = {};
  int64_t row_offset[LoraOps::kMaxLoraGroup] = {};
  int count = 0;
};

// Tokens per launch pair of lora_apply: what the workspace's fp32 shrunk rows (tokens x G x R)
// hold; 0 when not even one token fits.
int64_t lora_chunk_tokens(int64_t group_rank, size_t workspace_bytes);

// For the tokens of x (T, K) whose slot s = slot_ids[t] is in [0, num_slots): the shrink
// u = a_g[s] x[t] of every target g (fp32, into the workspace), then the expand
// out[t][row_offset_g + n] += scales[s] * b_g[s][n] . u_g, rounded once; tokens of slot -1 (or
// beyond the stacks) are left alone. rank: R, the stacks' width; out (T, >= every target's end).
// Two launches per chunk of lora_chunk_tokens tokens (one chunk for a decode step), or one
// where fused_counters is not null (IB_LORA_FUSED=1; three unsigned counters, zero before the
// launch and left zero after it) and the vectorized kernels apply (K and R multiples of 16
// bytes' elements, 16-byte aligned stacks). With pdl the two launches take part in programmatic
// dependent launch as the decode kernels do (the shrink loads its A rows into L2 before it waits
// for x); the single launch does not.
inline constexpr size_t kLoraFusedCounterBytes = 3 * sizeof(unsigned);
void launch_lora_apply(const Tensor& x, const Tensor& slot_ids, const LoraGroupPtrs& group,
                       int64_t rank, int64_t num_slots, const Tensor& scales, void* workspace,
                       size_t workspace_bytes, unsigned* fused_counters, Tensor out,
                       cudaStream_t stream, bool pdl = false);

}  // namespace ib::cuda
