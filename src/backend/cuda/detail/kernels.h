// Host-side launchers of the CUDA kernels, one group per .cu file. Each enqueues on `stream`,
// never synchronizes and never allocates, so every op can be captured in a CUDA graph. Shapes are
// checked by the caller (CudaBackend); launchers check what their kernels additionally need.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"

namespace ib::cuda {

struct AttnLora;  // detail/lora_kernels.h

// ---- elementwise.cu ----
void launch_fill_uniform(Tensor dst, uint64_t seed, uint64_t stream_id, float scale,
                         cudaStream_t stream);
void launch_fill_constant(Tensor dst, float value, cudaStream_t stream);
// dst[i] = src[i] converted; n elements; both float dtypes (f32/bf16/f16), device memory.
void launch_convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n,
                    cudaStream_t stream);
// pdl: launched with programmatic dependent launch (detail/pdl.cuh), on the decode path's
// kernels; every such kernel waits for its predecessor before touching activations.
void launch_silu_mul(const Tensor& gate_up, Tensor out, cudaStream_t stream, bool pdl = false);
// out (T, F) = gelu_tanh(gate_up[:, :F]) * gate_up[:, F:] (ops.h DenseOps::gelu_tanh_mul).
void launch_gelu_tanh_mul(const Tensor& gate_up, Tensor out, cudaStream_t stream);
// In place, in fp32, rounded once: x = cap * tanh(x / cap) when cap > 0, else x * mul + add.
void launch_affine_softcap(Tensor x, float mul, float add, float cap, cudaStream_t stream);
// out (R, D) = x[row_ids[r]] for any element type; rows with an id outside x become zeros.
void launch_gather_rows(const Tensor& x, const Tensor& row_ids, Tensor out, cudaStream_t stream,
                        bool pdl = false);
// dst <- src, bytes a multiple of 16 and both 16-byte aligned: the bandwidth-ceiling copy (the
// phase-1 benchmark's copy kernel: 4 blocks of 512 threads per SM, 16 bytes per thread).
void launch_copy16(const void* src, void* dst, size_t bytes, int num_sms, cudaStream_t stream);
// out (M, N) += bias (N).
void launch_bias_add(Tensor out, const Tensor& bias, cudaStream_t stream);

// ---- norm.cu ----
// residual == nullptr: out = rms_norm(x) * weight. Otherwise residual += x, out =
// rms_norm(residual). sync (null: none): with IB_QUANT_SYNC, the flag set of the quantized GEMV
// launched right after (GemvQuant::sync), as launch_quantize_rms_rows takes it; returns whether
// it took it (the GEMV then waits for x.rows() blocks).
bool launch_rms_norm(Tensor* residual, const Tensor& x, const Tensor& weight, float eps, Tensor out,
                     cudaStream_t stream, bool pdl = false, unsigned* sync = nullptr);
// IB_NORM_REGS: rows of up to 4 16-byte vectors per thread (8,192 bf16 values) through the
// register form (x read once, the gain loaded before the PDL wait; true) or the two-pass kernel
// (false, the default until measured on the H200). Process-wide, like the GEMV's switches.
void set_norm_regs(bool on);
bool norm_regs();
// IB_NORM_POST (default off): x = rms_norm(x) * x_weight rounded to x's dtype (held in registers,
// x itself not written), then residual += x and out = rms_norm(residual) * weight, in one kernel
// (Gemma-2's post-norm, residual add and next pre-norm; DenseOps::norm_add_rms_norm). Returns
// false, launching nothing, where the switch or IB_NORM_REGS is off or the row does not fit the
// register form: the caller then runs the two ops.
void set_norm_post(bool on);
bool norm_post();
bool launch_norm_add_rms_norm(Tensor residual, const Tensor& x, const Tensor& x_weight,
                              const Tensor& weight, float eps, Tensor out, cudaStream_t stream,
                              bool pdl);

// ---- gemv.cu: the memory-bound skinny GEMM for decode (tensor cores, M <= kGemvMaxM) ----
// w is dense (x's dtype) or quantized (backend/weight.h; out in x's dtype). W8A8 formats (FP8
// E4M3, INT8 W8A8; M <= 8): x is first quantized per token (launch_quantize_rms_rows, with the
// norm and its gain where fused) into act.xq. INT8 W8A16 (M <= kGemvMaxM): a fused op's x is
// first normalised (rms_norm(x) * gain) into act.xn. act is scratch the caller owns.
inline constexpr int kGemvMaxM = 32;
struct GemvQuantAct {
  Tensor xq;      // W8A8: (>= M, K) of the weight's code dtype (fp8_e4m3 / int8), 16-byte aligned
  Tensor scales;  // W8A8: (>= M) f32
  Tensor xn;      // W8A16: >= M * K elements of x's dtype, 16-byte aligned
  // IB_QUANT_SYNC (null: none): a flag set of two words, zero, for the quantize (W8A8) or norm
  // (W8A16, 4-bit) kernel and the GEMV after it (GemvQuant::sync); the caller alternates two sets
  // between calls.
  unsigned* sync = nullptr;
};
// The most tokens the GEMV takes for a weight format.
int64_t gemv_max_m(WeightFormat format);
// True when the kernel can run these operands (bf16/f16, K % 64 == 0, 16-byte aligned, M small).
bool gemv_supported(const Tensor& x, const WeightRef& w, const Tensor& out);
void launch_gemv(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                 cudaStream_t stream, bool pdl = false, const GemvQuantAct* act = nullptr);
// IB_GEMV_PERSIST: the quantized formats' GEMVs (plain and fused) run a persistent grid of this
// many blocks per SM looping over their row tiles (0: one block per tile). Process-wide: set by
// the backend from its switches before it launches anything.
void set_gemv_persist_blocks_per_sm(int blocks);
int gemv_persist_blocks_per_sm();
// IB_GEMV_SWIGLU_BLOCKS: 3 runs the dense gate/up GEMV's variant whose registers allow 3 blocks
// per SM, 0 the compiler's choice. Process-wide, like the above.
void set_gemv_swiglu_min_blocks(int blocks);
int gemv_swiglu_min_blocks();
// IB_GEMV_QKV_BLOCKS: the dense q/k/v GEMV (RoPE/cache epilogue) of launches of at least this many
// tokens runs its variant whose registers allow 3 blocks per SM (default 2; 0: never).
// Process-wide.
void set_gemv_qkv_blocks_from(int tokens);
int gemv_qkv_blocks_from();
// IB_LORA_QKV_BLOCKS: the LoRA q/k/v GEMV with the same 3-blocks cap where the base takes it
// (default true; false: 2 blocks). Process-wide.
void set_lora_qkv_blocks(bool three);
bool lora_qkv_blocks();
// IB_GEMV_RING: the quantized formats' GEMVs (not their LoRA variants) stream their weights
// through a cp.async ring in shared memory (true, the default; 1-4 and 9-16 tokens) or registers.
// Process-wide, like the above.
void set_gemv_ring(bool on);
bool gemv_ring();
// IB_GEMV_DENSE_RING: the dense GEMVs of 1-8 tokens with x's dtype out (not their LoRA variants)
// stream their weights through a cp.async ring in dynamic shared memory (true) or registers
// (false, the default until measured on the H200). Process-wide, like the above.
void set_gemv_dense_ring(bool on);
bool gemv_dense_ring();
// IB_GEMV_INT4_WARPS: the W4A16 GEMVs of 1-4 tokens that run through the ring (one n-tile, one
// block per row tile) split K across this many warps per block, 8, 4 or 2: fewer warps stream
// more steps each; 0 (the default): 4 for launches of at least 1,024 row tiles, else 8.
// Process-wide, like the above.
void set_gemv_int4_warps(int warps);
int gemv_int4_warps();
// The fused decode GEMVs (detail/gemv_kernel.cuh), M <= kGemvFusedMaxM, out in x's dtype; gain
// (K) is the norm's gain for a quantized weight, null for a dense one (folded into w):
//  kRmsSwiGlu:  out (M, N/2) = silu(g) * u, [g | u] = (x / rms(x) * gain) @ w^T (+ bias)
//  kAccumulate: out (M, N) += x @ w^T (+ bias)              [the residual add; gain null]
// lora (lora_kernels.h GemvLora, null: none) adds a LoRA update to the matmul's result in the
// epilogue, before the SwiGLU, the residual add or the rotation.
inline constexpr int kGemvFusedMaxM = 8;
struct GemvLora;
enum class GemvFusion { kRmsSwiGlu, kAccumulate };
// Operands any fused GEMV takes (kRmsSwiGlu also needs an even number of rows).
bool gemv_fused_supported(const Tensor& x, const WeightRef& w, GemvFusion fusion);
// Whether every fused GEMV of a Llama-family layer takes these shapes (K a multiple of the
// kernel's 64-element step for the qkv, o, gate/up and down matrices; head_dim a multiple of
// its 16-row tile for RoPE).
bool gemv_fused_shapes_fit(const AttentionShape& shape, int64_t hidden_size,
                           int64_t intermediate_size);
void launch_gemv_fused(const Tensor& x, const Tensor* gain, const WeightRef& w, const Tensor* bias,
                       Tensor out, GemvFusion fusion, float eps, cudaStream_t stream,
                       bool pdl = false, const GemvQuantAct* act = nullptr,
                       const GemvLora* lora = nullptr);
// qkv (M, (Hq + 2 Hkv) * hd) = (x / rms(x) * gain) @ w^T (+ bias), then rope_and_cache on it, in
// one kernel: the q and k heads rotated in fp32 before the one rounding, k and v written into kv.
bool gemv_rope_cache_supported(const Tensor& x, const WeightRef& w, const AttentionShape& shape);
void launch_gemv_rope_cache(const Tensor& x, const Tensor* gain, const WeightRef& w,
                            const Tensor* bias, float eps, const Tensor& positions,
                            const Tensor& slot_mapping, const Tensor& inv_freq,
                            const KvCacheLayer& kv, const AttentionShape& shape, Tensor qkv,
                            cudaStream_t stream, bool pdl = false,
                            const GemvQuantAct* act = nullptr, const GemvLora* lora = nullptr);
// w (N, K) columns *= gain (K), in w's dtype (rounded once).
void launch_scale_columns(Tensor w, const Tensor& gain, cudaStream_t stream);

// ---- quant.cu ----
// Each row of src (N, K) (f32/bf16/f16) quantized as backend/weight.h defines it, to dst's
// dtype: fp8_e4m3 or int8 (N, K), scales f32 (N). Weights at load, and activations per token.
// fixed: a static activation scale (weight.h; INT8 W8A8 and FP8; scale 0: dynamic per row).
struct StaticActQuant {
  float scale = 0.0f;
  int32_t zero_point = 0;  // asymmetric: codes u - 128 with u = clamp(rne(x * (1 / s)) + z, 0, 255)
  bool asymmetric = false;
  // The sums' correction factor z - 128 (0: none), against the weight's row sums.
  int32_t zero() const { return asymmetric ? zero_point - 128 : 0; }
};
// The static parameters of w (dynamic where w has none).
StaticActQuant static_act_quant(const WeightRef& w);
void launch_quantize_rows(const Tensor& src, Tensor dst, Tensor scales, cudaStream_t stream,
                          StaticActQuant fixed = {});
// The same of src * gain (gain (K) or null); with rms, src is the h of rms_norm(h) and each row's
// scale also carries 1 / rms(h): dst * scale = the quantized rms_norm(h) * gain (static: the
// codes of rms_norm(h) * gain with the fixed scale, written as each row's scale).
// sync (null: none): the flag set of the GEMV launched right after (GemvQuant::sync): each block
// counts itself into sync[0] once its codes and scale are stored, and with IB_QUANT_SYNC=2 lets
// that GEMV launch before it waits for src. Returns whether it took sync (the vectorised form
// only); the GEMV then waits for src.rows() blocks.
bool launch_quantize_rms_rows(const Tensor& src, const Tensor* gain, float eps, bool rms,
                              Tensor dst, Tensor scales, cudaStream_t stream, bool pdl = false,
                              StaticActQuant fixed = {}, unsigned* sync = nullptr);
// out (N) int32 = sum_k data[n][k] of an int8 weight.
void launch_weight_row_sums(const WeightRef& w, Tensor out, cudaStream_t stream);
// INT8 W8A16 at large M: dst (N, K) (bf16/f16) = data (N, K) int8 * scales[n], rounded once.
void launch_dequantize_int8(const WeightRef& w, Tensor dst, cudaStream_t stream);
// ---- quant_int4.cu (backend/weight.h's 4-bit formats) ----
// dst (N, K) bf16/fp16 = the 4-bit weight dequantized, in x's column order (act-order undone).
void launch_dequantize_4bit(const WeightRef& w, Tensor dst, cudaStream_t stream);
// out (kInt4W4A16: awq asymmetric or gptq symmetric; kNf4) = dense (N, K) quantized at load.
void launch_quantize_4bit(const Tensor& dense, const WeightRef& out, bool symmetric,
                          cudaStream_t stream);
// ---- quant_gemm.cu: the weight-only formats past the decode GEMV (IB_QUANT_GEMM) ----
// Whether the tensor-core GEMM takes x (M, K) bf16/fp16 with w: kInt4W4A16 or kNf4 with groups of
// a multiple of 32 (act-order too), kInt8W8A16; K a multiple of 16, x and the codes 16-byte
// aligned.
bool quant_gemm_takes(const Tensor& x, const WeightRef& w);
// Sets the GEMM kernels' shared-memory allowance on the current device (before any launch or
// capture uses them there).
cudaError_t prepare_quant_gemm();
// Its scratch: act-order's permuted rows and split K's partial sums.
inline constexpr size_t kQuantGemmScratchBytes = size_t{32} << 20;
// out (M, N) = x @ w^T (+ bias), or out += with accumulate, w's codes turned into x's dtype in
// shared memory stage by stage (the values the dequantization writes); fp32 sums rounded once.
void launch_quant_gemm(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                       bool accumulate, void* scratch, size_t scratch_bytes, int num_sms,
                       cudaStream_t stream);
// ---- gguf.cu (backend/weight.h's kGguf) ----
// The GGUF GEMV's most tokens; more take the dequantizing path (cuBLASLt).
inline constexpr int kGgufGemvMaxM = 8;
// Whether the GGUF kernels take x (M, K) bf16/fp16 with w (K a multiple of 32, aligned rows).
bool gguf_operands_ok(const Tensor& x, const WeightRef& w);
// The scratch launch_gemv_gguf needs for tokens x K: the codes and the block scales.
int64_t gguf_gemv_scratch_bytes(int64_t tokens, int64_t k);
// out (M <= 8, N) = x' @ w^T (+ bias), or += with accumulate: x quantized per 32 into scratch, a
// warp per two rows of w.
void launch_gemv_gguf(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out,
                      bool accumulate, void* scratch, size_t scratch_bytes, cudaStream_t stream,
                      bool pdl = false);
// The fused ops' GGUF form, M <= 8: x = rms_norm(h) * gain quantized per 32 into scratch by one
// kernel, then out (M, N) = x' @ w^T (+ bias), or with swiglu (w: 2F rows, gate then up; no
// bias) out (M, F) = silu(gate) * up in the GEMV's epilogue.
void launch_rms_gemv_gguf(const Tensor& h, const Tensor& gain, float eps, const WeightRef& w,
                          const Tensor* bias, Tensor out, bool swiglu, void* scratch,
                          size_t scratch_bytes, cudaStream_t stream, bool pdl);
// IB_GGUF_WIDE: the GGUF decode GEMVs of fewer than 8,192 row pairs split K across the 4 warps of
// a block per row pair (true), or a warp per row pair (false, the default: measured faster on the
// H200). Process-wide, like the above.
void set_gguf_wide(bool on);
bool gguf_wide();
// dst (M, K) = x' (x through its per-32 int8 round trip), x's dtype.
void launch_q8_round_trip(const Tensor& x, Tensor dst, cudaStream_t stream);
// dst (N, K) bf16/fp16 = the kGguf weight dequantized.
void launch_dequantize_gguf(const WeightRef& w, Tensor dst, cudaStream_t stream);
// INT8 W8A8 after cuBLASLt's int32 GEMM: out (M, N) = (acc (M, N) int32 - zero * row_sums[n]) *
// x_scales[m] * w_scales[n] (+ bias[n]), out bf16/f16; zero = z - 128 of an asymmetric static
// activation scale (row_sums (N) int32), else 0 (row_sums null).
void launch_dequantize_int32(const Tensor& acc, const Tensor& x_scales, const Tensor& w_scales,
                             const Tensor* bias, Tensor out, cudaStream_t stream, int32_t zero = 0,
                             const Tensor* row_sums = nullptr);

// ---- rope_cache.cu ----
// IB_ROPE_VEC (default on, bench/NOTES.md): rope_and_cache by 16-byte vectors of pairs, a thread
// each, items flattened over the tokens (the same arithmetic per pair, so the same values), where
// head_dim / 2 is a multiple of a vector; otherwise, and off, a thread per pair. Process-wide, like
// the norm's switches; rope_vec_launches counts the vector form's launches.
void set_rope_vec(bool on);
bool rope_vec();
int64_t rope_vec_launches();
void launch_rope_and_cache(Tensor qkv, const Tensor& positions, const Tensor& slot_mapping,
                           const Tensor& inv_freq, const KvCacheLayer& kv,
                           const AttentionShape& shape, cudaStream_t stream, bool pdl = false);

// ---- attention_split_kv.cu: one query token per work item, split along the keys ----
// Bytes of workspace the split-KV kernel needs for `num_splits` partitions per token.
size_t split_kv_workspace_bytes(int num_tokens, const AttentionShape& shape, int num_splits);
// Keys per partition that keeps the workspace within workspace_bytes and fills the GPU.
int split_kv_partition_size(const AttentionMetadata& meta, const AttentionShape& shape,
                            size_t workspace_bytes, int num_sms);
// counters: num_counters zero-initialised words the kernel leaves zeroed; when the launch has
// at most that many (token, KV head chunk) blocks per partition, the partitions are merged in
// the kernel (no merge launch), otherwise by the merge kernel. pdl_trigger_early (with pdl): the
// next kernel may launch when this one starts, not only when it ends (SplitParams). lean
// (IB_ATTN_LEAN, 0-2): the few-block configuration of bf16/fp16 caches at head_dim 64 or 128 and
// groups of up to 4 runs split_kv_lean_kernel (fewer dependent memory round trips): 1 with 8
// warps where the blocks fit one an SM, else 4; 2 with 4.
// lora (null: none; detail/attn_lora.cuh): the o op's lookahead shares, computed where the lean
// form runs with every chunk finished in the launch and at most 8 tokens.
// Returns whether the lean form ran, and whether it computed lora's shares.
struct SplitKvRan {
  bool lean = false;
  bool lora = false;
};
SplitKvRan launch_attention_split_kv(const Tensor& qkv, const KvCacheLayer& kv,
                                     const AttentionMetadata& meta, const AttentionShape& shape,
                                     int partition_size, void* workspace, size_t workspace_bytes,
                                     unsigned* counters, size_t num_counters, int num_sms,
                                     Tensor out, cudaStream_t stream, bool pdl = false,
                                     bool prefetch_kv = false, bool pdl_trigger_early = true,
                                     int lean = 0, const AttnLora* lora = nullptr);
bool split_kv_supports(const AttentionShape& shape);

// ---- attention_flash.cu: tensor-core flash attention for prefill / mixed batches ----
bool flash_supports(DType dtype, const AttentionShape& shape);
void launch_attention_flash(const Tensor& qkv, const KvCacheLayer& kv,
                            const AttentionMetadata& meta, const AttentionShape& shape, Tensor out,
                            cudaStream_t stream);

// ---- attention_decode_mma.cu: decode steps on tensor cores (IB_ATTN_MMA) ----
// Whether the kernel takes the step's shapes: bf16 / fp16 activations with a cache of their
// dtype or E4M3 in cache blocks of a power-of-two size, head_dim 64, 96 or 128, GQA groups of at
// most 16 query heads, no block-sparse pattern.
bool decode_mma_supports(DType dtype, const KvCacheLayer& kv, const AttentionShape& shape);
// A decode step (meta.max_query_len == 1): a block per (sequence, KV head), the group's query
// heads as the MMA's rows; sliding windows and soft-capped logits as the other kernels. An E4M3
// cache's bytes come by cp.async and are converted in shared memory; e4m3_f16 (IB_ATTN_E4M3_F16)
// runs a bf16 model's MMAs over it in fp16. max_blocks (IB_ATTN_MMA_PERSIST x SMs): at most that
// many blocks, each taking (sequence, KV head) items in turn; 0, a block per item.
void launch_attention_decode_mma(const Tensor& qkv, const KvCacheLayer& kv,
                                 const AttentionMetadata& meta, const AttentionShape& shape,
                                 Tensor out, cudaStream_t stream, bool e4m3_f16 = false,
                                 int max_blocks = 0);

// ---- sampling.cu ----
// workspace: scratch for the multi-block greedy path (the attention workspace, free between ops).
void launch_sample(const Tensor& logits, const SamplingMetadata& meta, Tensor out_tokens,
                   void* workspace, size_t workspace_bytes, cudaStream_t stream, bool pdl = false);

}  // namespace ib::cuda
