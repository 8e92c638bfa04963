// ModelWeights (engine-owned): a Llama-family model's weights in backend memory, fused for the
// forward pass (q/k/v into one matrix, gate/up into one), loaded from dummy values, safetensors
// files or a GGUF file.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/config.h"

namespace ib {

enum class LoadFormat { kAuto, kDummy, kSafetensors, kGguf };

struct WeightOptions {
  // auto: gguf when path is a GGUF file, safetensors when path has them, else dummy
  LoadFormat format = LoadFormat::kAuto;
  std::string path;   // model directory (config.json + *.safetensors) or a .gguf file
  uint64_t seed = 0;  // dummy weights
  // The format of each layer's four matmul weights (wqkv, wo, w_gate_up, w_down); the embedding,
  // lm_head, norms and biases stay dense, as vLLM's --quantization fp8 keeps them. create_engine
  // sets it from EngineConfig::quantization.
  WeightFormat quantization = WeightFormat::kDense;
  // kInt4W4A16 quantized at load: awq's zero points (true) or gptq's symmetric codes
  // (quantization_is_asymmetric(EngineConfig::quantization)); a checkpoint's are as published.
  bool asymmetric = false;
  // --quantization gguf: the GGUF file's matmul weights as stored, in their ggml blocks
  // (backend/weight.h's kGguf) where the backend runs them, else dequantized at load into the
  // activation dtype (quantization stays kDense); a user error unless they come from a GGUF file.
  bool gguf_as_stored = false;
  // A part of a model (tensor parallelism's loading in parts, issue 19): config holds layers
  // [first_layer, first_layer + config.num_layers) of a model of whole_num_layers, each with
  // that layer's values (dummy: dummy_weight_stream of its index in the whole model;
  // safetensors: model.layers.<index>.*, the checkpoint checked against the whole model's
  // schema). 0 otherwise; dummy weights or a safetensors checkpoint (dense, quantized at load,
  // or quantized as published), not GGUF.
  int first_layer = 0;
  int whole_num_layers = 0;  // 0: config.num_layers (the whole model)
};

// How each layer's matmul weights are stored (backend/weight.h): the format and, for the 4-bit
// ones, the group size (0: one group per row, G = K, a per-channel checkpoint's), the load-time
// method (WeightRef::asymmetric) and whether they hold an act-order input_perm (GPTQ desc_act).
struct MatmulLayout {
  WeightFormat format = WeightFormat::kDense;
  std::string name = "none";  // the --quantization that names it ("awq", "gptq", "nf4", "fp8", ...)
  int group_size = 0;
  bool asymmetric = false;  // kInt4W4A16: zero points (awq at load, or a checkpoint's)
  bool act_order = false;
  // kGguf (--quantization gguf): each layer's wqkv, wo, w_gate_up, w_down rows as the file stores
  // them (detail::gguf_matmul_rows) or the dummy Q4_K_M mix gives them; every weight has rows.
  std::vector<std::array<GgufRows, 4>> gguf;
};
// The layout of --load-format dummy --quantization gguf: llama.cpp's Q4_K_M mix over config's
// matmul weights (engine/weights_gguf.cpp); a user error naming the weight when its rows are not
// whole blocks, or for mixture-of-experts and MLA models.
Result<MatmulLayout> gguf_q4_k_m_layout(const ModelConfig& config);
// The layout weights quantized at load take: groups of 128 (kInt4W4A16) or 64 (kNf4).
MatmulLayout load_time_layout(WeightFormat format, bool asymmetric);

// Shapes (D = hidden, F = intermediate, Q = num_heads * head_dim, KV = num_kv_heads * head_dim).
// The matmul weights are WeightRefs (backend/weight.h): their format, packed data and scales;
// dense in the activation dtype, or quantized (WeightOptions::quantization). Norms, biases and
// the embedding table stay dense tensors.
struct LayerWeights {
  Tensor attn_norm;  // (D)
  WeightRef wqkv;    // (Q + 2 KV, D): rows q, then k, then v (HF q_proj/k_proj/v_proj)
  Tensor bqkv;       // (Q + 2 KV) or empty when the model has no attention bias
  WeightRef wo;      // (D, Q)
  Tensor ffn_norm;   // (D)
  // Gemma-2's sandwich norms (ModelConfig::sandwich_norms; empty otherwise): on the attention
  // output and on the MLP output, each before its residual add (its pre-MLP norm is ffn_norm).
  Tensor post_attn_norm;  // (D)
  Tensor post_ffn_norm;   // (D)
  WeightRef w_gate_up;    // (2F, D): rows gate, then up
  WeightRef w_down;       // (D, F)
  // A mixture-of-experts layer (Mixtral; w_gate_up and w_down then empty): the router and each
  // expert's SwiGLU MLP, dense in the activation dtype (quantized experts are not run yet).
  WeightRef router;                       // (E, D) HF block_sparse_moe.gate
  std::vector<WeightRef> expert_gate_up;  // E x (2F, D): rows w1 (gate), then w3 (up)
  std::vector<WeightRef> expert_down;     // E x (D, F): w2
  // DeepSeek-V2's multi-head latent attention (ModelConfig::mla; empty otherwise; wqkv then holds
  // the query projection (H (N + P), D), or (H (N + P), Rq) after q_a when q_lora_rank > 0; wo is
  // (D, H V)), and its shared experts (MoE layers). Dense, in the activation dtype.
  WeightRef q_a;             // (Rq, D) q_a_proj
  Tensor q_a_norm;           // (Rq) q_a_layernorm
  WeightRef kv_a;            // (R + P, D) kv_a_proj_with_mqa
  Tensor kv_a_norm;          // (R) kv_a_layernorm
  WeightRef kv_b;            // (H (N + V), R) kv_b_proj
  WeightRef shared_gate_up;  // (2 Fs, D): shared_experts gate_proj, then up_proj
  WeightRef shared_down;     // (D, Fs)
  // Where the backend runs the shared experts inside moe_experts (Architecture::moe_always_on):
  // the routed experts, then the shared MLP as Fs / F experts of the routed ones' width F (views;
  // shared_gate_up and shared_down then hold those experts' rows, rearranged at load). Empty
  // otherwise.
  std::vector<WeightRef> moe_gate_up;
  std::vector<WeightRef> moe_down;
  // The checkpoint's KV-cache scales (self_attn.k_scale / v_scale, as vLLM's FP8 checkpoints
  // hold them), used by an fp8 KV cache (backend/ops.h KvCacheLayer); 1.0 where it has none.
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  // The bytes every tensor of the layer occupies as stored (scales included).
  int64_t bytes() const;
};

struct ModelWeights {
  Tensor embed;       // (V, D)
  Tensor final_norm;  // (D)
  WeightRef lm_head;  // (V, D); the same memory as embed when tied
  std::vector<LayerWeights> layers;
  std::vector<Buffer> storage;  // owns the memory behind the views above
  // e.g. "dummy (seed 0)", "safetensors: DIR (2 files)", each followed by the quantization when
  // there is one: ", fp8 (W8A8 E4M3, per-channel weights, per-token dynamic activations)"
  std::string description;
  int64_t bytes = 0;  // as allocated: quantized data and scales at their real size
};

// options.format with kAuto resolved as load_weights resolves it: gguf when the path is a GGUF
// file, safetensors when it has them, else dummy.
LoadFormat resolved_load_format(const WeightOptions& options);

// Loads (or generates) the weights of config into backend memory at backend.activation_dtype().
// Dummy weights: uniform(-a, a) with a = sqrt(3 / fan_in) for matrices (unit-variance outputs),
// uniform(-1, 1) embeddings, norms 1.0, biases uniform(-0.1, 0.1); seeded and identical on every
// backend (Backend::fill_uniform with a fixed stream id per tensor: dummy_weight_stream()).
// MoE routers: expert e's row is uniform(-a, a) times kDummyRouterSpread[e % 8], a fixed spread
// from 0.5 to 2: over normalised hidden states the logits of a wider row vary more, so it wins
// the top-k more often. Routing is then neither uniform (every expert alike) nor collapsed (one
// expert taking every token): each expert keeps a share, the widest several times the narrowest
// (MoeDummy tests in mixtral_test.cpp measure it).
// Safetensors: HF names (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...),
// q/k/v and gate/up fused at load, bf16/f16/f32 converted to the backend dtype.
// GGUF: llama.cpp's names mapped to the HF ones (gguf_model.h), every tensor (F32, F16, BF16,
// Q8_0, Q4_0, Q4_K, Q5_K, Q6_K) dequantized on the host, then loaded as a dense safetensors
// checkpoint would be; llama's q/k rows are put back in HF order.
// Quantized matmul weights: their dense values (the same dummy streams and scales, or the
// checkpoint's tensors) are written into one scratch buffer sized for the largest matmul weight,
// then quantized into the weight (Backend::quantize_weight); the scratch is freed before return,
// so no dense copy of the model is ever held.
// Errors: a quantization the backend does not run, and weights (with the scratch) larger than the
// backend's free memory or memory limit (both refused before any allocation, with the numbers and
// the fix); missing or mismatched tensors (named); unreadable files.
Result<ModelWeights> load_weights(const ModelConfig& config, const WeightOptions& options,
                                  Backend& backend);

// The bytes load_weights allocates for config's weights at activation dtype act with matmul
// weights in format (each tensor rounded up to 256 bytes), without the transient scratch.
int64_t planned_weight_bytes(const ModelConfig& config, DType act, const MatmulLayout& layout);
// The same for weights quantized at load into format (load_time_layout; 4-bit: gptq's bytes,
// which are awq's).
int64_t planned_weight_bytes(const ModelConfig& config, DType act, WeightFormat format);

// The rotary inverse frequencies (head_dim / 2), including Llama-3 and linear rope scaling, as HF
// transformers computes them: in fp32 with the same operation order (torch evaluates these
// expressions on float32 tensors, with Python scalars rounded to fp32).
std::vector<float> rope_inv_freq(const ModelConfig& config);

// The fill_uniform stream of each dummy tensor: 1 embedding, 2 lm_head, and for layer L
// 1000 + 16 L + {0 q, 1 k, 2 v, 3 o, 4 gate, 5 up, 6 down, 7 q bias, 8 k bias, 9 v bias}.
enum class DummyTensor { kQ, kK, kV, kO, kGate, kUp, kDown, kQBias, kKBias, kVBias };
uint64_t dummy_weight_stream(int layer, DummyTensor tensor);
inline constexpr uint64_t kDummyEmbedStream = 1;
inline constexpr uint64_t kDummyLmHeadStream = 2;
// MoE layers: the router (part 0) and expert e's gate (1), up (2) and down (3):
// 1,000,000 + 4 (1024 L + e) + part (the router is e = 0's part 0).
enum class DummyExpertPart { kRouter, kGate, kUp, kDown };
uint64_t dummy_expert_stream(int layer, int expert, DummyExpertPart part);
inline constexpr float kDummyRouterSpread[8] = {0.5f, 2.0f, 0.75f, 1.5f, 1.0f, 1.75f, 0.6f, 1.25f};
// Multi-head latent attention layers (DeepSeek-V2): 2,000,000 + 16 L + part; the query
// projection (kQ) and o_proj (kO) keep their dummy_weight_stream.
enum class DummyMlaPart { kQA, kKvA, kKvB, kSharedGate, kSharedUp, kSharedDown };
uint64_t dummy_mla_stream(int layer, DummyMlaPart part);

// YaRN's attention factor (transformers' _compute_yarn_parameters: attention_factor, else
// get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are set, else
// get_mscale(factor)), which multiplies cos and sin; 1 for other rope types.
float rope_attention_factor(const ModelConfig& config);
// What transformers' DeepseekV2Attention multiplies its softmax scale by under rope scaling:
// get_mscale(factor, mscale_all_dim)^2 when mscale_all_dim is set, else 1. With the attention
// factor on cos and sin, the rope part of a score is scaled by get_mscale(factor, mscale)^2 and the
// rest by get_mscale(factor, mscale_all_dim)^2 (transformers 5.17's fp32 logits of tiny YaRN
// checkpoints: tools/capture_hf_golden.py, engine_golden_test).
double mla_softmax_mscale(const ModelConfig& config);

}  // namespace ib
