// The op sets a backend implements, each a small interface that grows on its own: DenseOps
// (initialisation, embedding, norms, matmuls, activations, sampling), AttentionOps (RoPE with the
// KV write, paged attention), QuantOps (quantizing weights at load) and the optional
// FusedDecodeOps (the dense decoder's fused decode step, reached through
// Backend::fused_decode_ops()), MoeOps (mixture-of-experts routing and expert MLPs, reached
// through Backend::moe_ops()), MlaOps (multi-head latent attention, Backend::mla_ops()), LoraOps
// (LoRA adapters' low-rank updates, reached through Backend::lora_ops()) and VisionOps (a ViT
// vision encoder's blocks, reached through Backend::vision_ops()).
//
// Contract: tensors passed to ops live in the backend's memory (Device::alloc); shapes are
// checked with IB_ASSERT. "act" below means the backend's activation dtype: fp32 on the CPU, the
// model dtype (bf16/fp16/fp32) on CUDA. Accumulation is always fp32. Ops are enqueued in call
// order on the device's stream.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "backend/block_sparse.h"
#include "backend/tensor.h"
#include "backend/weight.h"
#include "core/assert.h"
#include "core/result.h"

namespace ib {

// Per-layer view of the paged KV cache.
// Layout of k and v: (num_blocks, num_kv_heads, block_size, head_dim), dtype = act or fp8_e4m3.
// A token at slot s lives in block s / block_size at offset s % block_size.
// fp8_e4m3 (vLLM's --kv-cache-dtype fp8): one fp32 scale per layer for K and one for V (vLLM's
// k_scale / v_scale); a value x (the rotated k, or v, as it lands in qkv, in act) is stored as
// e4m3(x / scale), rounded to nearest even and saturated to +-448 (f32_to_f8e4m3_bits), and read
// as float(stored) * scale in fp32. In act, the scales are unused (1).
struct KvCacheLayer {
  Tensor k;
  Tensor v;
  int block_size = 16;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

struct AttentionShape {
  int num_heads = 0;     // query heads
  int num_kv_heads = 0;  // key/value heads (GQA: num_heads % num_kv_heads == 0)
  int head_dim = 0;
  float scale = 0;         // softmax scale, usually 1/sqrt(head_dim)
  int sliding_window = 0;  // 0: full causal attention; w > 0: key positions > q_pos - w only
  // > 0: each score (q k^T * scale) becomes cap * tanh(score / cap) before the mask and the
  // softmax (Gemma-2's attn_logit_softcapping); 0: none.
  float logit_softcap = 0;
  // Enabled: block-sparse attention (backend/block_sparse.h) on top of the causal mask; the
  // engine never combines it with a sliding window.
  BlockSparse block_sparse = {};
};

// The batch the attention op sees. Sequences are packed: sequence i owns query tokens
// [query_start[i], query_start[i+1]) of the flattened batch; after this step its cache holds
// context_lens[i] tokens, the last (query_start[i+1] - query_start[i]) of them being this
// step's tokens. Query token j of sequence i therefore sits at absolute position
// context_lens[i] - q_len_i + j and attends causally to positions <= its own.
struct AttentionMetadata {
  int num_seqs = 0;
  int num_tokens = 0;
  Tensor query_start;     // int32 (num_seqs + 1)
  Tensor context_lens;    // int32 (num_seqs)
  Tensor block_tables;    // int32 (num_seqs, max_blocks_per_seq); unused entries may be -1
  int max_query_len = 0;  // host-side hints for kernel choice
  int max_context_len = 0;
  // Host-side hint: sequences [0, decode_prefix) have one query token each (query_start[i] = i),
  // so a backend may run them on its decode kernels and the rest of a mixed batch apart. 0: no
  // such promise.
  int decode_prefix = 0;
};

// Per-row sampling parameters, in backend memory.
// temperature <= 0 means greedy (argmax, lowest index on ties). Otherwise: scale by
// 1/temperature, keep the top_k largest logits (top_k <= 0: all), softmax, keep the smallest
// set of most probable tokens whose mass reaches top_p, renormalise, and draw with the uniform
// u = counter_uniform(seed, 0, step) by inverse CDF over tokens in descending probability.
// Precisely (the CPU reference, cpu/sampling.cpp): candidates are ordered by descending scaled
// logit (logit / temperature), ties by ascending token id; the nucleus is the shortest prefix
// whose cumulative mass reaches top_p * total; the draw is the first candidate whose cumulative
// mass exceeds u * (nucleus mass).
struct SamplingMetadata {
  int num_rows = 0;
  bool all_greedy = true;  // host-side hint: skip the stochastic path
  Tensor temperature;      // f32 (num_rows)
  Tensor top_k;            // int32 (num_rows)
  Tensor top_p;            // f32 (num_rows)
  Tensor seed;             // int64 (num_rows)
  Tensor step;             // int32 (num_rows): index of the token being sampled
};

class DenseOps {
 public:
  virtual ~DenseOps() = default;

  // ---- initialisation ----
  // dst[i] = scale * (2 * counter_uniform(seed, stream, i) - 1), rounded to dst.dtype.
  virtual void fill_uniform(Tensor dst, uint64_t seed, uint64_t stream, float scale) = 0;
  virtual void fill_constant(Tensor dst, float value) = 0;
  // w (N, K): w[n][k] *= gain[k] (gain (K), w's dtype), rounded once.
  virtual void scale_columns(const WeightRef& w, const Tensor& gain) = 0;

  // ---- forward-pass ops ----
  // out (T, D) act = table[token_ids[t]]; table (V, D) act; token_ids int32 (T).
  virtual void embedding(const Tensor& token_ids, const Tensor& table, Tensor out) = 0;
  // out (T, D) = x / rms(x) * weight; x (T, D) act, weight (D) act.
  virtual void rms_norm(const Tensor& x, const Tensor& weight, float eps, Tensor out) = 0;
  // residual += x (in place, act); out = rms_norm(residual) * weight.
  virtual void add_rms_norm(Tensor residual, const Tensor& x, const Tensor& weight, float eps,
                            Tensor out) = 0;
  // x = rms_norm(x) * x_weight (rounded to act), then add_rms_norm(residual, x, weight, eps, out):
  // a post-norm, the residual add and the next pre-norm (Gemma-2), in one op where the backend
  // fuses them. Afterwards x holds either the normalised x or its old values.
  virtual void norm_add_rms_norm(Tensor residual, Tensor x, const Tensor& x_weight,
                                 const Tensor& weight, float eps, Tensor out) {
    rms_norm(x, x_weight, eps, x);
    add_rms_norm(residual, x, weight, eps, out);
  }
  // out (M, N) = x (M, K) @ w (N, K)^T (+ bias (N)); fp32 accumulation; w in any format the
  // backend supports, computed as weight.h defines it. out may be f32 while x is act (logits).
  virtual void matmul(const Tensor& x, const WeightRef& w, const Tensor* bias, Tensor out) = 0;
  // out (T, F) = silu(gate_up[:, :F]) * gate_up[:, F:]; gate_up (T, 2F).
  virtual void silu_mul(const Tensor& gate_up, Tensor out) = 0;
  // out (T, F) = gelu_tanh(gate_up[:, :F]) * gate_up[:, F:] (GeGLU with PyTorch's tanh
  // approximation, gelu(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))); gate_up (T, 2F).
  virtual void gelu_tanh_mul(const Tensor& gate_up, Tensor out) = 0;
  // x = x * mul + add in place, computed in fp32 and rounded once to x's dtype (Gemma's scaled
  // embeddings and its (1 + w) norm gains).
  virtual void affine(Tensor x, float mul, float add) = 0;
  // x = cap * tanh(x / cap) in place, in fp32, rounded once (Gemma-2's final logit soft-capping).
  virtual void softcap(Tensor x, float cap) = 0;
  // out (R, D) = x[row_ids[r]]; row_ids int32 (R).
  virtual void gather_rows(const Tensor& x, const Tensor& row_ids, Tensor out) = 0;
  // out_tokens int32 (R) from logits f32 (R, V), as SamplingMetadata describes.
  virtual void sample(const Tensor& logits, const SamplingMetadata& meta, Tensor out_tokens) = 0;
};

class AttentionOps {
 public:
  virtual ~AttentionOps() = default;
  // qkv (T, (Hq + 2 Hkv) * head_dim): rotates q and k in place with rotate-half RoPE at
  // positions (int32 T) using inv_freq (f32, head_dim / 2): angle = float(pos) * inv_freq[i];
  // then writes k and v into the cache at slot_mapping (int32 T; -1 skips the token), in the
  // cache's dtype (KvCacheLayer).
  virtual void rope_and_cache(Tensor qkv, const Tensor& positions, const Tensor& slot_mapping,
                              const Tensor& inv_freq, const KvCacheLayer& kv,
                              const AttentionShape& shape) = 0;
  // out (T, Hq * head_dim) = softmax(softcap(q k^T * scale) + causal/sliding mask) v over the paged
  // cache, for every query token of qkv (only its q part is read); an fp8 cache is read as
  // KvCacheLayer defines it.
  virtual void attention(const Tensor& qkv, const KvCacheLayer& kv, const AttentionMetadata& meta,
                         const AttentionShape& shape, Tensor out) = 0;
  // Whether the attention op runs this shape here (CUDA kernels cover head_dim 64, 96, 128, 256);
  // a user error naming the limit otherwise, checked before any weight is loaded.
  virtual Status supports_attention(const AttentionShape& /*shape*/) const { return Ok{}; }
};

class QuantOps {
 public:
  virtual ~QuantOps() = default;
  // Quantizes dense (N, K) (act) into out, whose tensors are allocated in out.format's layout
  // (weight.h). kFp8E4M3: per output channel, scales[n] = max_k |dense[n][k]| / 448 (1 for a
  // zero row) and data[n][k] = e4m3(dense[n][k] * inv_n), inv_n = 448 / max_k |dense[n][k]| (0 for
  // a zero row), rounded to nearest even, in fp32.
  virtual void quantize_weight(const Tensor& dense, const WeightRef& out) = 0;
  // Readies the backend to run matmuls on a quantized weight that arrived already quantized (a
  // published checkpoint's): the scratch its ops need, which quantize_weight reserves itself.
  // Called once per weight after loading; an allocation failure is returned.
  virtual Status prepare_weight(const WeightRef& /*w*/) { return Ok{}; }
  // out (N) int32 = sum_k w.data[n][k], of an int8 weight (W8A16 / W8A8): the zero point's
  // correction of an asymmetric static activation scale (weight.h).
  virtual void weight_row_sums(const WeightRef& w, Tensor out) = 0;
};

// The dense decoder's fused decode step (CUDA; bench/NOTES.md, phase 3), used behind the
// architecture seam (engine/arch/dense_decoder.cpp). A dense weight expects its RMSNorm's gain
// folded into its columns (DenseOps::scale_columns, the gain then set to ones), so that
// rms_norm(h) * g @ w^T = rms_norm(h) @ (w * g)^T, and gain null; a quantized weight keeps the
// gain (folding would quantize twice), passed as gain. The CPU backend is their oracle through
// the unfused ops; it has them only as their composed reference, for tests
// (cpu/fused_reference.h).
struct FusedLora;

class FusedDecodeOps {
 public:
  virtual ~FusedDecodeOps() = default;
  // Whether the ops exist for a model of these shapes (hidden size D, intermediate size F, the
  // attention heads), and whether they run a step of num_tokens rows.
  virtual bool fused_decode_fits(const AttentionShape& shape, int64_t hidden_size,
                                 int64_t intermediate_size) const = 0;
  virtual bool fused_decode(int64_t num_tokens) const = 0;
  // Whether the ops take a LoRA update (their `lora` argument) from slots of this rank (R, the
  // stacks' width); false: the engine runs steps with adapters on the unfused ops and LoraOps.
  virtual bool fused_lora(int64_t /*rank*/) const { return false; }
  // Whether the ops take FusedLora::next_m (the caller then computes the lookahead matrices).
  virtual bool fused_lora_lookahead() const { return false; }
  // Before the attention whose output a (M, K) is the input of matmul_add(a, w, residual, lora):
  // that op's operands, which the attention may use to compute the op's shrink and its lookahead
  // (CUDA, IB_LORA_ATTN=1); lora null or the op not next after the attention: nothing.
  virtual void lora_before_attention(const Tensor& /*a*/, const Tensor& /*residual*/,
                                     const FusedLora* /*lora*/) {}
  // Each op's `lora` (null: none) adds LoraOps::lora_apply_group's update of the op's matmul
  // input to its matmul output, before the op's rotation, SwiGLU or residual add. For the two
  // rms ops that input is rms_norm(h) * gain, so an A whose gain was folded into its columns
  // (as the weights' are) goes with gain null.
  // qkv = (rms_norm(h) * gain) @ w^T (+ bias (N)), h (M, K) un-normalised, gain (K) act or null
  // (folded), then rope_and_cache(qkv, ...) as AttentionOps describes, in one op.
  virtual void rms_matmul_rope_cache(const Tensor& h, const Tensor* gain, const WeightRef& w,
                                     const Tensor* bias, float eps, const Tensor& positions,
                                     const Tensor& slot_mapping, const Tensor& inv_freq,
                                     const KvCacheLayer& kv, const AttentionShape& shape,
                                     Tensor qkv, const FusedLora* lora = nullptr) = 0;
  // out (M, F) = silu(g) * u where [g | u] = (rms_norm(h) * gain) @ w^T; w (2F, K); gain as
  // above.
  virtual void rms_matmul_swiglu(const Tensor& h, const Tensor* gain, const WeightRef& w, float eps,
                                 Tensor out, const FusedLora* lora = nullptr) = 0;
  // residual (M, N) += x (M, K) @ w (N, K)^T, fp32 accumulation, rounded once.
  virtual void matmul_add(const Tensor& x, const WeightRef& w, Tensor residual,
                          const FusedLora* lora = nullptr) = 0;
};

// A model's quantized experts (MoeOps::runs_quantized_experts): their format, group size (K
// elements a scale; 0: one group per row), act-order (a column permutation), and the hidden width
// D (gate_up's K) and expert width F (down's K).
struct QuantizedExperts {
  WeightFormat format = WeightFormat::kDense;
  int group_size = 0;
  bool act_order = false;
  int64_t hidden = 0, width = 0;
};

// DeepSeek's router options beyond Mixtral's (MoeOps::moe_route_grouped).
struct MoeRouting {
  bool renormalize = true;  // the top-k weights divided by their sum
  // group_limited_greedy: the E experts in num_groups groups of E / num_groups consecutive ids;
  // only the topk_groups groups whose largest p is highest (ties: the lower group) compete, the
  // others' p taken as 0 (transformers' masked_fill). num_groups <= 1: every expert competes.
  int num_groups = 1;
  int topk_groups = 1;
  float scale = 1.0f;  // routed_scaling_factor: each weight multiplied by it, last, in fp32
  // Always-on experts (DeepSeek's shared experts run as routed ones, MoeOps::
  // fuses_shared_experts): expert_ids and expert_weights rows hold k + always_on columns, the
  // router's top-k first, then experts E, E + 1, ... (past the router's E) at weight 1.0,
  // neither scaled nor counted in expert_tokens.
  int always_on = 0;
};

// A sparse mixture-of-experts MLP (Mixtral), used behind the architecture seam
// (engine/arch/mixtral.cpp), as transformers' MixtralSparseMoeBlock computes it. Optional: a
// backend without it returns nullptr from Backend::moe_ops(), and the engine refuses an MoE model
// on it before loading weights.
class MoeOps {
 public:
  virtual ~MoeOps() = default;
  // Per token t: p = softmax(router_logits[t]) in fp32 (max subtracted, sum of exp in fp32), the
  // k = expert_ids.dim(1) largest p in descending order (ties: the lower expert id first) into
  // expert_ids[t] (int32) and their p into expert_weights[t] (f32), divided by their sum when
  // renormalize (Mixtral's top-k renormalisation). router_logits f32 (T, E); expert_ids,
  // expert_weights (T, k). expert_tokens int64 (E) += the tokens routed to each expert (each
  // token counts once per expert it picks): the engine's routing telemetry.
  virtual void moe_route(const Tensor& router_logits, bool renormalize, Tensor expert_ids,
                         Tensor expert_weights, Tensor expert_tokens) = 0;
  // out (T, D) act = sum over j of expert_weights[t][j] * down[e](silu(g) * u), with
  // [g | u] = x[t] @ gate_up[e]^T and e = expert_ids[t][j]; x (T, D) act, gate_up[e] (2F, D)
  // rows gate (HF w1) then up (w3), down[e] (D, F) (w2). Each expert's output is scaled in fp32
  // and the experts are added in ascending id order (transformers' index_add_ loop).
  virtual void moe_experts(const Tensor& x, const Tensor& expert_ids, const Tensor& expert_weights,
                           std::span<const WeightRef> gate_up, std::span<const WeightRef> down,
                           Tensor out) = 0;
  // Whether moe_experts takes experts quantized as `experts` says (backend/weight.h), computed
  // as the backend's matmul computes them; dense experts always (checked before a model loads).
  virtual bool runs_quantized_experts(const QuantizedExperts& /*experts*/) const { return false; }
  // What runs_quantized_experts takes, in a phrase for the refusal ("" where it takes none).
  virtual std::string quantized_experts_taken() const { return ""; }
  // moe_route with DeepSeek's options (MoeRouting): softmax, the group limit, the top-k (ties:
  // the lower id), the renormalisation, then the scale. A backend that has only moe_route runs
  // the options moe_route covers (one group, scale 1); routes_grouped() says whether it runs
  // every option (checked before a model needing them loads).
  virtual bool routes_grouped() const { return false; }
  // Whether DeepSeek's shared experts run inside moe_experts, as always-on experts after the
  // routed ones (MoeRouting::always_on; their MLP split into experts of the routed ones' width),
  // instead of as a dense MLP beside it (CUDA: IB_MOE_SHARED, default 0; the CPU always does, so
  // its tests cover the rearranged weights against the independent references).
  virtual bool fuses_shared_experts() const { return true; }
  virtual void moe_route_grouped(const Tensor& router_logits, const MoeRouting& routing,
                                 Tensor expert_ids, Tensor expert_weights, Tensor expert_tokens) {
    IB_ASSERT(routing.num_groups <= 1 && routing.scale == 1.0f,
              "moe_route_grouped: this backend routes without groups or scaling only");
    moe_route(router_logits, routing.renormalize, expert_ids, expert_weights, expert_tokens);
  }
  // moe_experts, then DenseOps::add_rms_norm(residual, its output, norm_weight, eps, normed): the
  // experts' combine, the residual add and the next layer's input norm in one kernel, where
  // fuses_experts_add_norm() (for the engine to ask before calling). normed may be x itself (the
  // experts have read x by the time it is written).
  virtual bool fuses_experts_add_norm() const { return false; }
  virtual void moe_experts_add_rms_norm(const Tensor& /*x*/, const Tensor& /*expert_ids*/,
                                        const Tensor& /*expert_weights*/,
                                        std::span<const WeightRef> /*gate_up*/,
                                        std::span<const WeightRef> /*down*/, Tensor /*residual*/,
                                        const Tensor& /*norm_weight*/, float /*eps*/,
                                        Tensor /*normed*/) {
    IB_ASSERT(false, "moe_experts_add_rms_norm: this backend runs moe_experts, then add_rms_norm");
  }
};

// The shape of multi-head latent attention (DeepSeek-V2): H heads, the latent of R =
// kv_lora_rank values, query/key heads of N = qk_nope_head_dim + P = qk_rope_head_dim values,
// value heads of V = v_head_dim.
struct MlaShape {
  int num_heads = 0;
  int kv_lora_rank = 0;
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
  float scale = 0;          // softmax scale ((N + P)^-0.5)
  float rope_scale = 1.0f;  // YaRN's attention factor: cos and sin multiplied by it
};

// Multi-head latent attention over a cache of latents (DeepSeek-V2), used behind the
// architecture seam (engine/arch/deepseek2.cpp). The cache (KvCacheLayer) holds per token one
// entry of R + P values: the normalised latent c (kv_a_layernorm of the first R outputs of
// kv_a_proj_with_mqa) and the rotated shared rope key k_pe; kv.k is (num_blocks, 1, block_size,
// R + P), kv.v empty; act only (no fp8 cache). Optional: a backend without it returns nullptr
// from Backend::mla_ops(), and the engine refuses an MLA model on it before loading weights.
class MlaOps {
 public:
  virtual ~MlaOps() = default;
  // q (T, H (N + P)): each head's [q_nope | q_pe]; latent (T, R + P): [c | k_pe] as
  // kv_a_proj_with_mqa gives them. In place: c = rms_norm(c) * kv_norm (eps, as DenseOps), and q_pe
  // and k_pe rotated in DeepSeek's interleaved layout: each pair (x[2i], x[2i+1]) is the complex
  // number x[2i] + i x[2i+1] multiplied by rope_scale * (cos a + i sin a), a = float(pos) *
  // inv_freq[i] (inv_freq (P / 2)), in fp32; then [c | k_pe] written to the cache at
  // slot_mapping (-1 skips the token).
  virtual void mla_rope_and_cache(Tensor q, Tensor latent, const Tensor& kv_norm, float eps,
                                  const Tensor& positions, const Tensor& slot_mapping,
                                  const Tensor& inv_freq, const KvCacheLayer& kv,
                                  const MlaShape& shape) = 0;
  // out (T, H V): attention with the absorbed up-projections. kv_b (H (N + V), R) is
  // kv_b_proj: head h's rows [h (N + V), h (N + V) + N) are W_UK[h] (N, R), the next V rows
  // W_UV[h] (V, R). Per query token and head: q_lat = W_UK[h]^T q_nope (R), scores
  // s_j = scale * (q_lat . c_j + q_pe . k_pe_j) over the causal context (AttentionMetadata),
  // o = sum_j softmax(s)_j c_j (R), out[h] = W_UV[h] o: the same as attention with
  // k = [W_UK c | k_pe] and v = W_UV c per head, without materialising them. fp32 throughout.
  virtual void mla_attention(const Tensor& q, const WeightRef& kv_b, const KvCacheLayer& kv,
                             const AttentionMetadata& meta, const MlaShape& shape, Tensor out) = 0;
};

// One target of a grouped LoRA update (LoraOps::lora_apply_group): its slots' stacks as
// lora_apply takes them, and the first row of its range in the output.
struct LoraTargetStacks {
  Tensor a;  // (S, R, K) act
  Tensor b;  // (S, N, R) act
  int64_t row_offset = 0;
};

// The LoRA update a fused decode op adds to its matmul's output (FusedDecodeOps): the operands of
// LoraOps::lora_apply_group but x and out, which are the op's.
struct FusedLora {
  Tensor slot_ids;                            // (M) int32, -1: the base model only
  Tensor scales;                              // (S) f32
  std::span<const LoraTargetStacks> targets;  // 1 to LoraOps::kMaxLoraGroup
  // Optional: the targets of the fused op that reads this op's output next (same slots and
  // width R; A over this op's output features), when the caller knows it. A backend may then
  // take that op's shrink from this op's output as it stores it (CUDA, IB_LORA_IN_GEMV=3), and
  // the next op finds it done; the results are the same either way. Where the next op is one of
  // the rms ops, its A must have the norm's gain folded in (that op's gain null).
  std::span<const LoraTargetStacks> next;
  // Optional, with next (one per next target; empty: none): the next targets' lookahead
  // matrices over this op's input x, m_g (S, R, K) = a'_g @ (w + scale * b a) per slot
  // (LoraOps::lora_lookahead_matrix: w this op's dense weight, a and b its targets' stacks, a'_g
  // next's). next's shrink of the output this op adds x @ (w + scale b a)^T to is then
  // m_g . x + a'_g . (the output before the op), which a backend may compute with this op's own
  // shrink, before its matmul (CUDA, IB_LORA_IN_GEMV=5; FusedDecodeOps::fused_lora_lookahead).
  std::span<const Tensor> next_m;
};

// LoRA adapters' low-rank updates over a batch whose tokens use different adapters, or none
// (S-LoRA / Punica's gathered matmuls, BGMV: one op per projection, whatever the mix), used
// behind the architecture seam (engine/arch/dense_decoder.cpp) after each projection's matmul.
// Optional: a backend without it returns nullptr from Backend::lora_ops(), and the engine refuses
// LoRA on it before loading weights.
class LoraOps {
 public:
  virtual ~LoraOps() = default;
  // For every token t whose adapter slot s = slot_ids[t] is >= 0 (-1: the base model only):
  //   u[r] = sum_k a[s][r][k] * x[t][k]                 (shrink, fp32)
  //   out[t][row_offset + n] += scales[s] * sum_r b[s][n][r] * u[r]   (expand, fp32; one rounding)
  // x (T, K) act; a (S, R, K) act: slot s's A (rank, K) in its first rank rows, zeros after;
  // b (S, N, R) act: slot s's B (N, rank) in its first rank columns, zeros after (R: the largest
  // rank, --max-lora-rank); scales f32 (S); slot_ids int32 (T); out (T, >= row_offset + N) act.
  virtual void lora_apply(const Tensor& x, const Tensor& slot_ids, const Tensor& a, const Tensor& b,
                          const Tensor& scales, int64_t row_offset, Tensor out) = 0;
  // lora_apply of 1 to kMaxLoraGroup targets that share x, out and the slots' width R, with
  // disjoint row ranges (q, k and v into qkv; gate and up into gate_up): the same result as
  // applying them one by one (the default), in one shrink and one expand where a backend fuses
  // the group (CUDA: fewer launches per layer).
  static constexpr size_t kMaxLoraGroup = 3;
  // One slot's lookahead matrix of a next target (FusedLora::next_m): m (R, K) = a_next (R, N) @
  // (w (N, K) + scale * b (N, R') @ a (R', K)), the fp32 sums rounded once into act; a_next, a,
  // b and m in act (one slot's rows of their stacks), w the dense weight between.
  virtual void lora_lookahead_matrix(const Tensor& a_next, const Tensor& w, const Tensor& a,
                                     const Tensor& b, float scale, Tensor m) = 0;
  virtual void lora_apply_group(const Tensor& x, const Tensor& slot_ids,
                                std::span<const LoraTargetStacks> targets, const Tensor& scales,
                                Tensor out) {
    for (const LoraTargetStacks& t : targets) {
      lora_apply(x, slot_ids, t.a, t.b, scales, t.row_offset, out);
    }
  }
};

// A vision encoder's blocks that a decoder does not have (CLIP's ViT and LLaVA's projector, used
// by vision/clip_vision_tower.cpp): LayerNorm with a bias, residual adds, CLIP's and the
// projector's activations, bidirectional attention over whole images and a rotary embedding
// with per-row angles (Qwen2-VL's 2-D one, vision/qwen2vl_vision_tower.cpp). Optional: a backend
// without them returns nullptr from Backend::vision_ops(), and an image model is refused on it
// before any weight is loaded. All in act with fp32 arithmetic.
enum class VisionActivation {
  kQuickGelu,  // x * sigmoid(1.702 x) (CLIP's hidden_act "quick_gelu")
  kGeluErf     // 0.5 x (1 + erf(x / sqrt(2))) ("gelu", LLaVA's projector_hidden_act)
};

class VisionOps {
 public:
  virtual ~VisionOps() = default;
  // out (T, D) = (x - mean) / sqrt(var + eps) * weight + bias per row; mean and the biased
  // variance in two passes over the row. x (T, D); weight, bias (D).
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, float eps,
                          Tensor out) = 0;
  // x += y elementwise, rounded once; x and y the same shape.
  virtual void add(Tensor x, const Tensor& y) = 0;
  // x = act(x) in place.
  virtual void activation(Tensor x, VisionActivation act) = 0;
  // Unmasked attention within each sequence of seq_len consecutive rows (one image's tokens):
  // qkv (B * S, 3 * H * hd) rows [q | k | v], head h's at h * hd in each; out (B * S, H * hd)
  // = softmax(q k^T * scale) v per head, the softmax in two passes in fp32.
  virtual void bidirectional_attention(const Tensor& qkv, int64_t seq_len, int num_heads,
                                       float scale, Tensor out) = 0;
  // Rotate-half rotary embedding on the q and k heads of qkv (T, 3 H hd) in place, each row by
  // its own angles: cos, sin f32 (T, hd / 2). Pair i of a head (elements i and i + hd / 2) becomes
  // (x1 c - x2 s, x2 c + x1 s) with c = cos[t][i], s = sin[t][i], in fp32, rounded once; v is
  // left alone.
  virtual void rotary_rows(Tensor qkv, const Tensor& cos, const Tensor& sin, int num_heads) = 0;
  // A patch convolution's input as matmul rows (im2col with stride = kernel = patch): pixels
  // (N 3 S, S), N images of 3 channels of S x S, S a multiple of patch p; out (N (S/p)^2, 3 p p),
  // the row of the patch at grid (gy, gx) of image n at n (S/p)^2 + gy S/p + gx, its column
  // (c p + ky) p + kx holding pixel (c, gy p + ky, gx p + kx). Both in act; a copy, no rounding.
  virtual void unfold_patches(const Tensor& pixels, int64_t patch, Tensor out) = 0;
};

}  // namespace ib
