// The CUDA backend's debugging and A/B switches, read from the environment (the benchmark scripts
// set them; bench/NOTES.md has each one's measurement) and checked before any device is touched.
// Their names, accepted values and defaults are the list in backend/kernel_switches.h.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>

#include "backend/cuda/detail/cuda_backend_impl.h"
#include "core/result.h"

namespace ib::cuda {

// Unset variables stay nullopt (or empty) and leave the backend's defaults.
struct CudaSwitches {
  // IB_CUDA_DEBUG_SYNC=1: wait for every op, so an asynchronous fault names the op.
  std::optional<int64_t> debug_sync;
  // IB_PDL=0|1|2: programmatic dependent launch (CudaBackend::set_pdl has the modes).
  std::optional<int64_t> pdl;
  // IB_FUSED=0: the decode step without the fused norm/SwiGLU/residual GEMVs.
  std::optional<int64_t> fused;
  // IB_ADD_CUBLASLT=1: matmul_add of 2-8 rows on cuBLASLt for large weights (the down projection).
  std::optional<int64_t> add_cublaslt;
  // IB_MATMUL_TUNING=0: the static GEMV / cuBLASLt rule; =gemv: the GEMV for every matmul of at
  // most 8 rows, whatever the weight size; =1: tuning (the default), single rows on the GEMV within
  // the rule; =2: tuning single rows too; =3: every row count up to 8 on the GEMV within the rule.
  std::string matmul_tuning;
  // IB_ATTN_PREFETCH=N: the split-KV attention prefetches its blocks' K and V rows into L2 in
  // steps of at most N sequences (0: never; default 8).
  std::optional<int64_t> attn_prefetch;
  // IB_ATTN_LEAN=0|1|2: the lean split-KV decode form (CudaBackend::set_attention_lean).
  std::optional<int64_t> attn_lean;
  // IB_ATTN_MMA=N: decode steps of at least N sequences on the tensor-core decode kernel
  // (CudaBackend::set_attention_mma_min_seqs).
  std::optional<int64_t> attn_mma;
  // IB_ATTN_MIXED=N: a mixed batch's leading run of at least N one-token sequences on the decode
  // attention (CudaBackend::set_attention_mixed_min_seqs).
  std::optional<int64_t> attn_mixed;
  // IB_ATTN_MMA_PERSIST=N: the tensor-core decode attention's blocks an SM, 0: one per item
  // (CudaBackend::set_attention_mma_persist).
  std::optional<int64_t> attn_mma_persist;
  // IB_ATTN_E4M3_F16=0|1: fp16 MMAs over an E4M3 cache for bf16 models
  // (CudaBackend::set_attention_e4m3_f16).
  std::optional<int64_t> attn_e4m3_f16;
  // IB_CUDA_MLA=0|1: the MLA kernels offered to the engine (CudaBackend::set_mla).
  std::optional<int64_t> cuda_mla;
  // IB_MLA_SPLIT=0|1: the MLA attention split across blocks (CudaBackend::set_mla_split).
  std::optional<int64_t> mla_split;
  // IB_MOE_WIDE=N: the experts' matmuls of chunks of at most N tokens in tiles of 16 rows, a pair
  // a pass (CudaBackend::set_moe_wide_tokens).
  std::optional<int64_t> moe_wide;
  // IB_MOE_TILES=N: the experts' matmuls of chunks of at most N tokens in tiles
  // (CudaBackend::set_moe_tile_tokens).
  std::optional<int64_t> moe_tiles;
  // IB_MOE_BALANCE=N: larger chunks of at most N tokens in tiles balanced over the device
  // (CudaBackend::set_moe_balance_tokens).
  std::optional<int64_t> moe_balance;
  // IB_MOE_WARPS=N: chunks of at most N tokens in the balanced grid, a warp per work item
  // (CudaBackend::set_moe_warp_tokens).
  std::optional<int64_t> moe_warps;
  // IB_MOE_WARP_RING=0|1: the warp form's weights and x through a cp.async ring
  // (set_moe_warp_ring).
  std::optional<int64_t> moe_warp_ring;
  // IB_MOE_GEMM=N: calls of at least N tokens on the grouped GEMM
  // (CudaBackend::set_moe_gemm_tokens).
  std::optional<int64_t> moe_gemm;
  // IB_QUANT_GEMM=N: weight-only quantized matmuls of at most N rows past the GEMV on the
  // tensor-core GEMM (CudaBackend::set_quant_gemm_rows).
  std::optional<int64_t> quant_gemm;
  // IB_MOE_SHARED=0|1: DeepSeek's shared experts inside the expert kernels
  // (CudaBackend::set_moe_shared).
  std::optional<int64_t> moe_shared;
  // IB_MOE_PDL=0|1: the MoE kernels with programmatic dependent launch (CudaBackend::set_moe_pdl).
  std::optional<int64_t> moe_pdl;
  // IB_MOE_INT4_RING=0|1: the 4-bit experts' ring form (CudaBackend::set_moe_int4_ring).
  std::optional<int64_t> moe_int4_ring;
  // IB_MOE_ADD_NORM=0|1: the experts' combine, the residual add and the next input norm in one
  // kernel (CudaBackend::set_moe_add_norm).
  std::optional<int64_t> moe_add_norm;
  // IB_GEMV_PERSIST=N: the quantized formats' GEMVs on a persistent grid of N blocks per SM
  // (0: one block per row tile).
  std::optional<int64_t> gemv_persist;
  // IB_GEMV_RING=0|1: the quantized formats' GEMVs of 1-4 and 9-16 tokens through the cp.async
  // ring (1) or registers.
  std::optional<int64_t> gemv_ring;
  // IB_GEMV_FUSE_QUANT=0|1: the W8A8 GEMVs of one token quantize x in each block
  // (set_gemv_fuse_quant).
  std::optional<int64_t> gemv_fuse_quant;
  // IB_GEMV_STAGE_X=0|1|2: the GEMVs of one token that copy x into each block: none, W8A16's,
  // every quantized format's (set_gemv_stage_x).
  std::optional<int64_t> gemv_stage_x;
  // IB_QUANT_TRIGGER=0|1|2: where the quantize kernel triggers its successor
  // (set_quant_trigger).
  std::optional<int64_t> quant_trigger;
  // IB_QUANT_SYNC=0|1|2: the quantized GEMVs wait for their quantize or norm kernel by a flag
  // (set_quant_sync).
  std::optional<int64_t> quant_sync;
  // IB_GEMV_STAGE_NORM=0|1: the staged W8A16 / 4-bit GEMVs normalise x in each block
  // (set_gemv_stage_norm).
  std::optional<int64_t> gemv_stage_norm;
  // IB_GEMM_M_BUCKETS=0|1|2|4|8|16: cuBLASLt plans per row bucket (set_gemm_m_buckets).
  std::optional<int64_t> gemm_m_buckets;
  // IB_GEMM_TUNE=0|1: the buckets' algorithms timed at their own M (set_gemm_tuning).
  std::optional<int64_t> gemm_tune;
  // IB_GEMV_DENSE_RING=0|1: the dense GEMVs through the ring (set_gemv_dense_ring).
  std::optional<int64_t> gemv_dense_ring;
  // IB_GEMV_INT4_WARPS=8|4|2|0: the W4A16 ring GEMVs' warps per block (set_gemv_int4_warps).
  std::optional<int64_t> gemv_int4_warps;
  // IB_NORM_REGS=0|1: the RMSNorm kernel's register form (set_norm_regs).
  std::optional<int64_t> norm_regs;
  // IB_ROPE_VEC=0|1: rope_and_cache by 16-byte vectors of pairs (set_rope_vec).
  std::optional<int64_t> rope_vec;
  // IB_NORM_POST=0|1: Gemma-2's post-norm, residual add and next pre-norm in one kernel
  // (set_norm_post).
  std::optional<int64_t> norm_post;
  // IB_GGUF_WIDE=0|1: the GGUF decode GEMVs' K split across warps (set_gguf_wide).
  std::optional<int64_t> gguf_wide;
  // IB_GEMV_SWIGLU_BLOCKS: the dense gate/up GEMV's register cap (set_gemv_swiglu_min_blocks).
  std::optional<int64_t> gemv_swiglu_blocks;
  // IB_GEMV_QKV_BLOCKS: the dense q/k/v GEMV's register cap from this many tokens
  // (set_gemv_qkv_blocks_from).
  std::optional<int64_t> gemv_qkv_blocks;
  // IB_LORA_QKV_BLOCKS (default 1): the LoRA q/k/v GEMV's register cap as the base's
  // (set_lora_qkv_blocks).
  std::optional<int64_t> lora_qkv_blocks;
  // IB_SMEM_CARVEOUT: every launch's shared-memory carve-out preference (set_smem_carveout).
  std::optional<int64_t> smem_carveout;
  // IB_LORA_FUSED=1: each LoRA group's shrink and expand in one launch.
  std::optional<int64_t> lora_fused;
  // IB_LORA_PDL=0: the LoRA kernels launched without programmatic dependent launch.
  std::optional<int64_t> lora_pdl;
  // IB_LORA_IN_GEMV=0|1|3|4|5: decode steps with adapters on the unfused ops (0), or the fused
  // ones with a shrink launch (1), chained shrinks (3: the GEMV before an op accumulates its
  // shrink), a shrink launch the GEMV waits for by flags (4) or lookahead shrinks (5, the
  // default: o's and down's launches also compute the next rms op's shrink).
  std::optional<int64_t> lora_in_gemv;
  // IB_LORA_ATTN=1: with 5, o's lookahead shrink in the decode attention's finishing blocks.
  std::optional<int64_t> lora_attn;
  // The names of the switches the environment set, for the backend's report.
  std::set<std::string> from_env;
};

// A value outside a variable's range is a user error naming the variable and the range.
Result<CudaSwitches> read_cuda_switches();
Status apply_cuda_switches(const CudaSwitches& s, CudaBackend& backend);

}  // namespace ib::cuda
