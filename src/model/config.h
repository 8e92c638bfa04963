// ModelConfig: one architecture, as in the model's HF config.json. Presets (presets.h)
// reproduce public configs exactly; hf_config.h reads config.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"

namespace ib {

struct RopeScaling {
  std::string type = "none";  // "none", "llama3", "linear", "dynamic", "longrope", "yarn"
  double factor = 1.0;
  double low_freq_factor = 1.0;              // llama3
  double high_freq_factor = 4.0;             // llama3
  int original_max_position_embeddings = 0;  // llama3, yarn
  // yarn (transformers' _compute_yarn_parameters): the attention factor multiplying cos and sin
  // (0: derived, get_mscale(factor, mscale) / get_mscale(factor, mscale_all_dim) when both are
  // set, else get_mscale(factor)); the correction range's rotations; floor/ceil of its bounds.
  double attention_factor = 0;
  double mscale = 0;
  double mscale_all_dim = 0;
  double beta_fast = 32;
  double beta_slow = 1;
  bool truncate = true;
};

// Mixture-of-experts (Mixtral, DeepSeek-V2). num_experts == 0: dense.
struct MoeConfig {
  int num_experts = 0;
  int experts_per_token = 0;
  int expert_intermediate_size = 0;  // per expert (Mixtral: = intermediate_size)
  int num_shared_experts = 0;        // DeepSeek
  int first_dense_layers = 0;        // DeepSeek: first_k_dense_replace
  // The router: how expert scores are computed and picked. The engine runs "softmax" scores with
  // "greedy" top-k (Mixtral, DeepSeek-V2-Lite) and, for DeepSeek-V2, "group_limited_greedy" (the
  // top-k among the topk_group groups of n_group whose best score is highest); other names are
  // refused before loading.
  std::string scoring_func = "softmax";
  std::string topk_method = "greedy";
  bool norm_topk_prob = true;          // the top-k weights renormalised to sum 1 (Mixtral: always)
  double routed_scaling_factor = 1.0;  // DeepSeek: the routed experts' weights scaled by it
  int num_groups = 0;                  // DeepSeek: n_group (group_limited_greedy)
  int topk_groups = 0;                 // DeepSeek: topk_group
};

// Multi-head latent attention (DeepSeek-V2). kv_lora_rank == 0: ordinary attention. The KV cache
// then holds one entry of kv_lora_rank + qk_rope_head_dim values per token and layer (the
// compressed latent and the rope part of the key), ModelConfig::kv_entry.
struct MlaConfig {
  int kv_lora_rank = 0;
  int q_lora_rank = 0;  // 0: no q compression
  int qk_nope_head_dim = 0;
  int qk_rope_head_dim = 0;
  int v_head_dim = 0;
};

// One token's KV-cache entry in one layer: K of heads x width values and, when separate_v, V of
// as many (GQA); MLA caches one latent of width values (heads 1, no separate V).
struct KvEntryShape {
  int heads = 0;
  int width = 0;
  bool separate_v = true;
  int64_t values() const { return int64_t{heads} * width * (separate_v ? 2 : 1); }
};

// A checkpoint published already quantized (config.json's quantization_config). The engine loads
// FP8 W8A8 checkpoints with dynamic activation scales: quant_method "fp8" (per-tensor weight
// scales) and "compressed-tensors" with 8-bit float weights (per-tensor or per-channel scales);
// and compressed-tensors INT8 checkpoints, symmetric int8 weights (per tensor or per channel)
// with dynamic per-token int8 activations (W8A8) or none (W8A16). Other methods and schemes are
// refused when config.json is read, naming them.
struct CheckpointQuantization {
  std::string quant_method;  // "" (not quantized), "fp8", "compressed-tensors"
  // The --quantization the matmul weights are stored for: "" (dense), "fp8" (F8_E4M3), "int8"
  // (I8, W8A16) or "int8-w8a8" (I8, per-token int8 activations); each with a weight_scale.
  std::string format;
  bool per_channel_scales = false;  // weight_scale (N) / (N, 1), else one per tensor
  // Static activation scales: each matmul source X.weight has X.input_scale, one float (fp8,
  // int8-w8a8; symmetric); false: activations quantized per token at run time.
  bool static_activations = false;
  // 4-bit checkpoints (format "awq", "gptq" or "nf4"; engine/int4_layouts.h unpacks them).
  // packing: "awq" (AutoAWQ GEMM), "gptq", "compressed-tensors" (pack-quantized) or
  // "bitsandbytes".
  std::string packing;
  int group_size = 0;            // K elements per scale; 0: one per row (G = K); nf4: blocksize
  bool zero_points = false;      // published zero points (awq, gptq sym false, weight_zero_point)
  bool act_order = false;        // gptq desc_act: g_idx sorted into an input_perm
  bool zeros_minus_one = false;  // gptq checkpoint_format "gptq": qzeros store z - 1
  bool quantized() const { return !format.empty(); }
};

struct ModelConfig {
  std::string name;    // preset name, or the directory it was read from
  std::string family;  // "llama", "mistral", "qwen2", "phi3", "gemma2", "mixtral", "deepseek_v2"
  std::string hf_architecture;  // e.g. "LlamaForCausalLM"
  std::string hf_repo_id;  // presets: the HF repo it reproduces, e.g. "meta-llama/Meta-Llama-3-8B"

  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // hidden_size / num_heads unless the config says otherwise
  int max_position_embeddings = 0;

  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  // Multimodal RoPE (Qwen2-VL's rope_scaling.mrope_section): the head_dim / 2 rotary pairs split
  // into temporal, height and width sections, each rotated by its own row of a token's 3-D
  // position (GenerationRequest::mrope_positions). Empty: one position per token.
  std::vector<int> mrope_section;
  double rms_norm_eps = 1e-5;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  bool mlp_bias = false;        // gate/up/down carry a bias (Llama's mlp_bias; none published)
  double partial_rotary_factor = 1.0;  // share of head_dim that RoPE rotates (Phi-3: 1.0)
  int sliding_window = 0;              // 0: none
  std::string hidden_act = "silu";
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  DType torch_dtype = DType::kBF16;     // dtype of the published weights
  CheckpointQuantization quantization;  // a pre-quantized checkpoint's format

  // Features the engine does not run yet (Gemma-2, DeepSeek-V2).
  double attn_logit_softcapping = 0;        // Gemma-2
  double final_logit_softcapping = 0;       // Gemma-2
  double query_pre_attn_scalar = 0;         // Gemma-2
  bool sandwich_norms = false;              // Gemma-2: post-attention and post-FFN norms
  bool scale_embeddings = false;            // Gemma-2: embeddings * sqrt(hidden_size)
  bool alternating_sliding_window = false;  // Gemma-2: every other layer local
  MoeConfig moe;
  MlaConfig mla;

  // Parameter count of the full model (embeddings and lm_head counted once each when untied).
  int64_t parameter_count() const;
  // Bytes of all weights at dtype.
  int64_t weight_bytes(DType dtype) const {
    return parameter_count() * static_cast<int64_t>(dtype_size(dtype));
  }
  // The KV cache's per-layer entry of one token (GQA: K and V of num_kv_heads x head_dim; MLA:
  // one latent of kv_lora_rank + qk_rope_head_dim).
  KvEntryShape kv_entry() const;
  // KV-cache bytes per token at dtype (all layers, K and V).
  int64_t kv_bytes_per_token(DType dtype) const;
  // What ordinary attention's cache (GQA/MHA: K and V of num_kv_heads heads, K of head_dim and V
  // of v_head_dim values each) would take per token at dtype, for comparison with an MLA cache;
  // kv_bytes_per_token for other models.
  int64_t gqa_kv_bytes_per_token(DType dtype) const;
  // Parameters a decode step must stream (all layers + lm_head + one embedding row; for MoE,
  // only the active experts).
  int64_t decode_streamed_parameter_count() const;

  // Architecture features the engine cannot run yet; empty when it can run this model.
  std::vector<std::string> unsupported_features() const;
  // A user error naming those features, or Ok.
  Status check_supported() const;
  // Structural sanity (positive sizes, heads divide, ...), with a message naming the field.
  Status validate() const;
};

}  // namespace ib
