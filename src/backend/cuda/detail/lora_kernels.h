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

// The LoRA update a fused decode GEMV adds in its epilogue (detail/gemv_kernel.cuh; FusedLora,
// backend/ops.h): for output row row_offset[g] + n of target g and a token t of slot s in
// [0, num_slots), scales[s] * b_g[s][n] . u[t][g * rank, + rank), before the epilogue's rotation,
// SwiGLU or residual add. Each block stages its rows of B (cp.async, before it waits for the
// previous kernel: B and the slot ids are constant during a step) and u in shared memory
// (gemv_lora_smem_bytes). u (T, count * rank) fp32 comes from launch_lora_shrink launched just
// before the GEMV, or from the GEMV before it (a chained shrink, next_u below; then
// un-normalised where u_rms). (The shrink's blocks inside the GEMV's own launch, IB_LORA_IN_GEMV=2,
// measured slower and were removed: bench/NOTES.md, "LoRA in the fused decode GEMVs".)
// rank a multiple of 8 (one 16-byte copy per 8 elements) and at most kGemvLoraMaxRank.
struct GemvLora {
  LoraGroupPtrs group;
  const int32_t* slot_ids = nullptr;
  const float* scales = nullptr;
  float* u = nullptr;
  int rank = 0, num_slots = 0;
  // u holds a_g[s] . x un-normalised (a chained shrink's, below): an rms op's epilogue scales
  // its LoRA term by the 1 / rms it computes for the token.
  bool u_rms = false;
  // A chained shrink (IB_LORA_IN_GEMV=3; next_u null: none): the shrink of the fused op that
  // reads this GEMV's output next, accumulated by this GEMV's blocks from the outputs they store
  // (as rounded): next_u[t][g R + r] += sum over the block's output features f of
  // next.a[g][slot(t)][r][f] * out[t][f], fp32 atomics into rows zeroed before the launch. The
  // a stacks (S, R, F) span this op's F output features (next.b, n and row_offset unused).
  LoraGroupPtrs next;
  float* next_u = nullptr;
  // IB_LORA_IN_GEMV=4 (null: none): the shrink launched just before this GEMV signals in this
  // LoraSync set (kLoraSyncWords words) instead of the GEMV waiting for its grid to finish.
  unsigned* sync = nullptr;
  unsigned u_blocks = 0;  // the shrink's blocks: u is whole once sync[kLoraSyncU] reaches it
};
// IB_LORA_IN_GEMV=4: a launched shrink and the LoRA GEMV after it meet by flags (detail/
// flag_sync.cuh). The shrink lets the GEMV launch before it waits for the kernel that wrote x
// (so the GEMV's blocks are resident and stream their first weights as early as the base
// model's), releases kLoraSyncX once that kernel is done (x is whole) and counts its blocks into
// kLoraSyncU once their rows of u are stored; the GEMV's blocks wait for kLoraSyncX instead of
// griddepcontrol.wait, for kLoraSyncU only before their epilogue, and the last of them to finish
// (kLoraSyncDone) sets the set's words back to 0. Pairs alternate between kLoraSyncSets sets: a
// pair's GEMV launches only after the GEMV two pairs back has finished, so a set is never reused
// while its last reader runs.
inline constexpr int kLoraSyncX = 0, kLoraSyncU = 1, kLoraSyncDone = 2, kLoraSyncWords = 4;
inline constexpr int kLoraSyncSets = 2;
inline constexpr int kGemvLoraMaxRank = 128;
// One chained-shrink accumulator (GemvLora::next_u): 8 tokens of kMaxLoraGroup targets' rows.
inline constexpr size_t kGemvLoraChainFloats = 8 * LoraOps::kMaxLoraGroup * kGemvLoraMaxRank;
// The dynamic shared memory of a LoRA GEMV block: u (tokens x G R fp32) and B (tokens x 16 rows x
// R act elements) for up to 8 tokens.
inline size_t gemv_lora_smem_bytes(int count, int rank, size_t act_bytes) {
  const auto r = static_cast<size_t>(rank);
  return 8 * static_cast<size_t>(count) * r * sizeof(float) + 8 * 16 * r * act_bytes;
}
// The shrink alone: u (T, G R) fp32 (the workspace's first T G R floats) = a_g[s] . xn[t] for
// every target g and each token t of slot s = slot_ids[t] in [0, num_slots) (other tokens' rows
// are left unwritten), where xn = x, or with norm, rms_norm(x) * gain (gain null: ones; eps the
// norm's). T at most lora_chunk_tokens. With pdl as launch_lora_apply's shrink.
struct LoraShrinkNorm {
  const Tensor* gain = nullptr;
  float eps = 0.0f;
};
// zero (null: none): zero_floats floats the launch sets to zero after it waited for the previous
// kernel (the chained shrinks' accumulators, GemvLora::next_u).
// sync (null: none): the LoraSync set of the LoRA GEMV launched right after (GemvLora::sync);
// the launch then has lora_shrink_blocks(T, group.count, rank) blocks.
void launch_lora_shrink(const Tensor& x, const LoraShrinkNorm* norm, const Tensor& slot_ids,
                        const LoraGroupPtrs& group, int64_t rank, int64_t num_slots, float* u,
                        cudaStream_t stream, bool pdl, float* zero = nullptr,
                        int64_t zero_floats = 0, unsigned* sync = nullptr);
// IB_LORA_ATTN=1: o's lookahead shrink inside the decode attention (detail/attn_lora.cuh,
// SplitParams::lora; rank 0: none), what launch_lora_lookahead computes for the o op. Rows of a
// token are its cur.count R own rows, then next_m.count R rows of the next op; A stacks (S, R, K)
// in T with K = num_heads x head_dim, a's and r's row length. Rows of tokens of slot -1 (or past
// num_slots) are left unwritten.
struct AttnLora {
  const int32_t* slot_ids = nullptr;
  int num_slots = 0;
  int rank = 0;
  LoraGroupPtrs cur;            // the op's own A stacks, over a
  LoraGroupPtrs next_m;         // the next op's lookahead matrices, over a
  LoraGroupPtrs next_a;         // the next op's A stacks (gain folded), over r
  const void* r = nullptr;      // (T tokens, K): the residual the op adds to
  float* u = nullptr;           // (T, cur.count R)
  float* u_next = nullptr;      // (T, next_m.count R)
  float* partials = nullptr;    // (T, gridDim.y, rows)
  int64_t partial_floats = 0;   // partials' capacity
  unsigned* counter = nullptr;  // one word, zero between launches
};

// IB_LORA_IN_GEMV=5's lookahead shrink, one launch for a decode step of up to 16 tokens: the op's
// own shrink u (T, cur.count R) = a_g[s] . x[t] (cur's a stacks), and the next op's
// u_next (T, next.count R) = m_g[s] . x[t] + a'_g[s] . x2[t], next_m's a: the lookahead
// matrices (S, R, K) over x, next_a's a: the next op's A stacks (S, R, K2) over x2 (T, K2), the
// residual the op adds to. Rows of tokens of slot -1 are left unwritten. pdl as the shrink's.
void launch_lora_lookahead(const Tensor& x, const Tensor& slot_ids, const LoraGroupPtrs& cur,
                           const LoraGroupPtrs& next_m, const Tensor& x2,
                           const LoraGroupPtrs& next_a, int64_t rank, int64_t num_slots, float* u,
                           float* u_next, cudaStream_t stream, bool pdl);
// m (R, K) = a_next (R, N) @ (w (N, K) + scale * b (N, R') @ a (R', K)), fp32, rounded once
// (LoraOps::lora_lookahead_matrix); R' at most kGemvLoraMaxRank.
void launch_lora_lookahead_matrix(const Tensor& a_next, const Tensor& w, const Tensor& a,
                                  const Tensor& b, float scale, Tensor m, cudaStream_t stream);
// The blocks of launch_lora_shrink's grid for T tokens of up to 16 (one token a block) or with a
// norm: T x ceil(count R / rows a block).
unsigned lora_shrink_blocks(int64_t tokens, int count, int64_t rank);
// The expand alone, from launch_lora_shrink's u: out[t][row_offset_g + n] += scales[s] *
// b_g[s][n] . u_g[t], rounded once; tokens of slot -1 left alone.
void launch_lora_expand(const float* u, const Tensor& slot_ids, const LoraGroupPtrs& group,
                        int64_t rank, int64_t num_slots, const Tensor& scales, Tensor out,
                        cudaStream_t stream, bool pdl);

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
