// fp32 kernels of the CPU backend, on raw row-major pointers. CpuBackend checks shapes and dtypes
// and calls these; they are separate so each can be read and tested on its own.
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/thread_pool.h"

namespace ib::cpu {

// out (m, n) = x (m, k) @ w (n, k)^T (+ bias (n) when non-null). Every out[i][j] is exactly
// dot_f32(x[i], w[j], k) (+ bias[j]), whatever m and the tiling.
void matmul_f32(ThreadPool& pool, const float* x, const float* w, const float* bias, float* out,
                int64_t m, int64_t n, int64_t k);

// FP8 E4M3 per row (backend/weight.h): q = e4m3(x * (448 / max|x|)) (x * 0 for a zero row);
// returns the row's scale max|x| / 448 (1 for a zero row).
float quantize_row_fp8(const float* x, int64_t k, uint8_t* q);
// Every row of dense (n, k) quantized so: data (n, k), scales (n).
void quantize_rows_fp8(ThreadPool& pool, const float* dense, int64_t n, int64_t k, uint8_t* data,
                       float* scales);
// out (m, n) = W8A8 FP8 x @ w^T as backend/weight.h defines it: x (m, k) quantized per row, or
// with the static scale input_scale when it is positive (e4m3(x * (1 / s)), a checkpoint's
// input_scale), w (n, k) E4M3 with scales (n); each sum is dot_f32 of the decoded values.
void matmul_fp8(ThreadPool& pool, const float* x, const uint8_t* w, const float* w_scales,
                const float* bias, float* out, int64_t m, int64_t n, int64_t k,
                float input_scale = 0.0f);

// INT8, per-channel / per-token symmetric (backend/weight.h): q = clamp(rne(x * (127 /
// max|x|)), -127, 127) (0 for a zero row); returns the row's scale max|x| / 127 (1 for a zero
// row).
inline constexpr float kInt8Max = 127.0f;
int8_t quantize_int8(float v, float inv);
float quantize_row_int8(const float* x, int64_t k, int8_t* q);
void quantize_rows_int8(ThreadPool& pool, const float* dense, int64_t n, int64_t k, int8_t* data,
                        float* scales);
// out (m, n) = INT8 W8A16 x @ w^T: dot_f32(x[i], decoded w[j]) * w_scales[j] (+ bias[j]).
void matmul_int8_w8a16(ThreadPool& pool, const float* x, const int8_t* w, const float* w_scales,
                       const float* bias, float* out, int64_t m, int64_t n, int64_t k);
// out (m, n) = INT8 W8A8: x quantized per row (or with the static parameters of `fixed` when it
// is non-null and its scale positive: backend/weight.h), int32 sums, times both scales
// (+ bias[j]).
struct StaticInt8Activations {
  float scale = 0.0f;
  int32_t zero_point = 0;
  bool asymmetric = false;
};
void matmul_int8_w8a8(ThreadPool& pool, const float* x, const int8_t* w, const float* w_scales,
                      const float* bias, float* out, int64_t m, int64_t n, int64_t k,
                      const StaticInt8Activations* fixed = nullptr);

// 4-bit weights (kInt4W4A16, kNf4; backend/weight.h), w's layout already checked.
// Row n of w dequantized into out (K floats), in w's column order (before input_perm).
void dequantize_4bit_row(const WeightRef& w, int64_t n, float* out);
// out (m, n) = x (m, k) @ w^T: each out[i][j] is dot_f32(x[i] permuted by w.input_perm, the
// dequantized row j) (+ bias[j]).
void matmul_4bit(ThreadPool& pool, const float* x, const WeightRef& w, const float* bias,
                 float* out, int64_t m);
// dense (n, k) quantized into out's tensors with weight.h's load-time RTN: kNf4, or kInt4W4A16
// with out.asymmetric choosing awq's zero points or gptq's symmetric z = 8.
void quantize_4bit(ThreadPool& pool, const float* dense, const WeightRef& out);

// kGguf (weight.h): x (m, K) replaced by its per-32-element int8 round trip x' (the activation
// quantization weight.h defines), in place into out_x (m, K).
void quantize_blocks_q8(const float* x, int64_t m, int64_t k, float* out_x);
// Row n of a kGguf weight dequantized (core/ggml_blocks.h) into out (K floats).
void dequantize_gguf_row(const WeightRef& w, int64_t n, float* out);
// out (m, N) = x' @ w^T (+ bias), w a kGguf weight.
void matmul_gguf(ThreadPool& pool, const float* x, const WeightRef& w, const float* bias,
                 float* out, int64_t m);

// See Backend::rope_and_cache. qkv (t, (hq + 2 hkv) * head_dim) fp32; cache layout as KvCacheLayer.
void rope_and_cache_f32(ThreadPool& pool, float* qkv, const int32_t* positions,
                        const int32_t* slot_mapping, const float* inv_freq, int64_t num_tokens,
                        const KvCacheLayer& kv, const AttentionShape& shape);

// See Backend::attention; host copies of the metadata arrays.
struct AttentionHostMeta {
  int num_seqs = 0;
  const int32_t* query_start = nullptr;   // (num_seqs + 1)
  const int32_t* context_lens = nullptr;  // (num_seqs)
  const int32_t* block_tables = nullptr;  // (num_seqs, max_blocks_per_seq)
  int64_t max_blocks_per_seq = 0;
};
void paged_attention_f32(ThreadPool& pool, const float* qkv, const KvCacheLayer& kv,
                         const AttentionHostMeta& meta, const AttentionShape& shape, float* out);

// One row of Backend::sample: logits (vocab) fp32 -> token id.
struct SampleParams {
  float temperature = 0;
  int top_k = 0;
  float top_p = 1;
  uint64_t seed = 0;
  int32_t step = 0;
};
int32_t sample_row(const float* logits, int64_t vocab, const SampleParams& params);

// One token's mixture-of-experts routing (MoeOps::moe_route): logits (num_experts) f32 ->
// ids (top_k) and weights (top_k), softmax in fp32, top-k descending (ties: lower id first),
// renormalised to sum 1 when renormalize.
void route_token(const float* logits, int num_experts, int top_k, bool renormalize, int32_t* ids,
                 float* weights);
// The same with DeepSeek's options (MoeOps::moe_route_grouped): the group limit before the top-k,
// the scale after the renormalisation.
void route_token_grouped(const float* logits, int num_experts, int top_k, const MoeRouting& routing,
                         int32_t* ids, float* weights);

// out = x * (1 / sqrt(mean(x^2) + eps)) * weight for one row of d elements (DenseOps::rms_norm).
void rms_norm_row(const float* x, const float* weight, float eps, int64_t d, float* out);

// MlaOps (cpu/mla.cpp), on host pointers.
void mla_rope_and_cache_f32(ThreadPool& pool, float* q, float* latent, const float* kv_norm,
                            float eps, const int32_t* positions, const int32_t* slot_mapping,
                            const float* inv_freq, int64_t num_tokens, const KvCacheLayer& kv,
                            const MlaShape& shape);
void mla_attention_f32(ThreadPool& pool, const float* q, const float* kv_b, const KvCacheLayer& kv,
                       const AttentionHostMeta& meta, const MlaShape& shape, float* out);

}  // namespace ib::cpu
