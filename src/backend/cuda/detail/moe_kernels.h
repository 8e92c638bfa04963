// Host-side launchers of moe.cu, the mixture-of-experts kernels (backend/ops.h, MoeOps). Like
// kernels.h's: they enqueue on `stream`, never synchronize and never allocate (graph-safe).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace ib::cuda {

inline constexpr int kMoeMaxExperts = 256;
inline constexpr int kMoeMaxTopK = 8;
// One device pointer per expert's weight (dense, x's dtype), passed to the kernels by value (a
// 2 KiB kernel parameter): a captured graph holds the pointers, nothing is uploaded per step.
struct MoeExpertPtrs {
  const void* ptr[kMoeMaxExperts] = {};
};
// One expert matrix set in 4-bit W4A16 (backend/weight.h kInt4W4A16) per expert: codes (N, K / 2)
// u8 (k = 2j in the low nibble of byte j), scales (N, K / group_size) f16, zeros (N, K /
// group_size) u8; group_size a multiple of 128 (the GEMV's 4-bit step), K too. A 6 KiB kernel
// parameter (CUDA 12.1+ takes up to 32 KiB).
struct MoeInt4Ptrs {
  const void* codes[kMoeMaxExperts] = {};
  const void* scales[kMoeMaxExperts] = {};
  const void* zeros[kMoeMaxExperts] = {};
  int group_size = 0;
};
// The experts' two matrices in 4-bit (moe_experts with kInt4W4A16 experts).
struct MoeInt4Experts {
  MoeInt4Ptrs gate_up, down;
};
// Whether the 4-bit expert kernels take a matrix of K columns in groups of group_size (0: one a
// row): K and the group multiples of their 128-k step (moe_int4.cu), the group dividing K.
inline bool moe_int4_takes(int64_t k, int64_t group_size) {
  const int64_t group = group_size == 0 ? k : group_size;
  return k > 0 && k % 128 == 0 && group > 0 && group % 128 == 0 && k % group == 0;
}
inline constexpr int kMoeMaxGroups = 64;  // DeepSeek's n_group (8 in V2 and V3)
// The router's options (ops.h MoeRouting), passed to the kernel by value.
struct MoeRouteParams {
  bool renormalize = true;
  int num_groups = 1, topk_groups = 1;  // group-limited routing where num_groups > 1
  float scale = 1.0f;
  int always_on = 0;  // MoeRouting::always_on: rows of k + always_on, experts E.. at weight 1
};
// ids (T, k + always_on) int32, weights (T, k + always_on) f32 from logits (T, E) f32; counts
// (E) int64 += picks.
// pdl: launched with programmatic dependent launch (IB_MOE_PDL; every MoE kernel waits for the
// kernels before it first, then lets the next one launch).
void launch_moe_route(const Tensor& logits, const MoeRouteParams& routing, Tensor ids,
                      Tensor weights, Tensor counts, cudaStream_t stream, bool pdl);
// Tokens per chunk of moe_experts: at most the device-side pair list's size, and what fits the
// workspace (each pair's activation row and fp32 output row); 0 when not even one token fits.
int64_t moe_chunk_tokens(int64_t tokens, int64_t k, int64_t d, int64_t f, DType dtype,
                         size_t workspace_bytes);
// out (T, D) = the experts' weighted SwiGLU MLPs (backend/ops.h); gate_up[e] (2F, D), down[e]
// (D, F) of x's dtype; workspace: scratch of workspace_bytes, free between ops. Chunks of at most
// tile_max_tokens tokens run the tile kernels (moe_tiles.cu, IB_MOE_TILES), larger ones of at
// most balance_max_tokens the tile kernels with their work items spread over the device
// (IB_MOE_BALANCE), larger ones the grouped GEMM (IB_MOE_GEMM, moe_gemm.cu) or else a warp per
// weight row; chunks of at most wide_max_tokens
// (IB_MOE_WIDE, before the others) the tile kernels with tiles of 16 rows, a pair a pass.
struct MoeKernelChoice {
  int num_sms = 1;
  int64_t wide_max_tokens = 0;
  int64_t tile_max_tokens = 0;
  int64_t balance_max_tokens = 0;
  // IB_MOE_WARPS: chunks of at most this many tokens (after wide_max_tokens, before the two
  // above) run the balanced grid with each work item a warp's (launch_moe_warps); 0: never.
  int64_t warp_max_tokens = 0;
  bool warp_ring = false;  // IB_MOE_WARP_RING: the warp form's operands through a cp.async ring
  bool pdl = false;        // IB_MOE_PDL: programmatic dependent launch
  bool int4_ring = false;  // IB_MOE_INT4_RING: 4-bit experts' chunks of <= 8 tokens streamed
  // IB_MOE_GEMM: calls of at least this many tokens (past the tile forms' sizes) run the grouped
  // tensor-core GEMM (moe_gemm.cu) where it takes the shapes; 0: never.
  int64_t gemm_min_tokens = 0;
};
// MoeOps::moe_experts_add_rms_norm's end: residual += the experts' output, normed =
// rms_norm(residual) * gain (DenseOps::add_rms_norm), all (T, D) or (D) of x's dtype. Where the
// row fits (at most 16 slots, 16-byte vectors, at most 4 of them a thread) one kernel a token does
// the combine, the add and the norm; otherwise the combine writes into normed and the norm kernel
// follows.
struct MoeAddNorm {
  Tensor residual;
  Tensor gain;
  float eps = 0.0f;
  Tensor normed;
};
// add_norm null: out = the experts' output; otherwise out is unused and add_norm's tensors take
// it as above.
// int4 non-null: the experts are 4-bit (gate_up and down unused) and every chunk runs
// launch_moe_int4's kernels (or the grouped GEMM). Returns whether the grouped GEMM ran.
bool launch_moe_experts(const Tensor& x, const Tensor& ids, const Tensor& weights,
                        const MoeExpertPtrs& gate_up, const MoeExpertPtrs& down, int num_experts,
                        int64_t f, void* workspace, size_t workspace_bytes,
                        const MoeKernelChoice& choice, Tensor out, cudaStream_t stream,
                        const MoeAddNorm* add_norm = nullptr, const MoeInt4Experts* int4 = nullptr);
// The tile kernels' forms: tiles of 8 weight rows and 4 pairs a pass on grids of the expert slots
// (IB_MOE_TILES); the same with 16 rows and a pair a pass (IB_MOE_WIDE); tiles of 8 rows with
// the work items (tile, expert) spread over the device's resident blocks (IB_MOE_BALANCE).
enum class MoeTileForm { kTiles, kWide, kBalanced };
// The tile kernels of one chunk (moe_tiles.cu): act (pairs, F) of dtype = silu(g) * u of each
// pair's x row (pair p: row p / k) and its expert's gate_up, then y (pairs, D) f32 = act @ down^T;
// grids of `slots` expert rows (min(E, pairs)), or (kBalanced) of the device's resident blocks
// over every (tile, expert); vec: 16-byte loads (D, F and pointers allow).
void launch_moe_tiles(const void* x, const int32_t* ids, int pairs, int k,
                      const MoeExpertPtrs& gate_up, const MoeExpertPtrs& down, bool vec, int64_t d,
                      int64_t f, unsigned slots, int num_sms, MoeTileForm form, DType dtype,
                      void* act, float* y, cudaStream_t stream, bool pdl);
// The same chunk with kBalanced's grid and items, each item a warp's (moe_warps.cu,
// IB_MOE_WARPS); ring: the weights and x through a per-warp cp.async ring in shared memory
// (IB_MOE_WARP_RING), where vec and the chunk has at most 8 tokens.
void launch_moe_warps(const void* x, const int32_t* ids, int pairs, int k,
                      const MoeExpertPtrs& gate_up, const MoeExpertPtrs& down, bool vec, int64_t d,
                      int64_t f, unsigned slots, int num_sms, bool ring, DType dtype, void* act,
                      float* y, cudaStream_t stream, bool pdl);

// The grouped GEMM's scratch for a chunk of `pairs` pairs (byte offsets into the workspace): act
// (max_tiles * 64 sorted rows, F) of the dtype, y (pairs, D) f32, the plan's sorted pair list,
// each tile's expert and the tile count.
struct MoeGemmLayout {
  int64_t max_tiles = 0;  // ceil(pairs / 64) + min(E, pairs): each expert pads one tile at most
  size_t act_offset = 0, y_offset = 0, sorted_offset = 0, tiles_offset = 0, count_offset = 0;
  size_t bytes = 0;
};
// Whether the grouped GEMM takes these experts: 16-bit floats, D and F multiples of 8 (16-byte
// rows; the caller checks x's and dense experts' alignment), at most kMoeMaxExperts; 4-bit ones
// (int4 non-null) as the 4-bit expert kernels take them (moe_int4_takes), codes 16-byte aligned.
bool moe_gemm_takes(DType dtype, int64_t d, int64_t f, int num_experts,
                    const MoeInt4Experts* int4 = nullptr);
MoeGemmLayout moe_gemm_layout(int64_t pairs, int num_experts, int64_t d, int64_t f, DType dtype);
// Tokens per chunk of the grouped GEMM: at most the plan kernel's pair list, and what the
// workspace holds (moe_gemm_layout); 0 when not even one token fits.
int64_t moe_gemm_chunk_tokens(int64_t tokens, int64_t k, int num_experts, int64_t d, int64_t f,
                              DType dtype, size_t workspace_bytes);
// One chunk through the grouped tensor-core GEMM (moe_gemm.cu): a plan kernel sorts the pairs by
// expert into tiles of 64 rows, then act = silu(g) * u and y (pairs, D) f32 = act @ down^T, the
// outputs as launch_moe_tiles'. int4 non-null: 4-bit experts (gate_up and down unused), each
// stage's codes turned into the dtype in shared memory. No host synchronization: graph-safe.
void launch_moe_gemm(const void* x, const int32_t* ids, int pairs, int k,
                     const MoeExpertPtrs& gate_up, const MoeExpertPtrs& down, int num_experts,
                     int64_t d, int64_t f, DType dtype, const MoeGemmLayout& layout,
                     void* workspace, cudaStream_t stream, bool pdl,
                     const MoeInt4Experts* int4 = nullptr);

// The 4-bit experts' kernels of one chunk (moe_int4.cu), the outputs as launch_moe_tiles': act
// (pairs, F) of dtype (bf16 / fp16) from x and gate_up, then y (pairs, D) f32 from act and down.
// Tiles of 16 weight rows on the W4A16 GEMV's tensor-core step, 8 pairs a pass; grids of `slots`
// expert rows. x and act rows 16-byte aligned (D and F multiples of 128). ring (IB_MOE_INT4_RING):
// chunks of at most 8 tokens stream each warp's steps through a ring in shared memory across the
// block's tiles.
void launch_moe_int4(const void* x, const int32_t* ids, int pairs, int k,
                     const MoeInt4Experts& experts, int64_t d, int64_t f, unsigned slots,
                     int num_sms, DType dtype, void* act, float* y, cudaStream_t stream, bool pdl,
                     bool ring);

}  // namespace ib::cuda
