#include "model/config.h"

#include <algorithm>
#include <string>

namespace ib {
namespace {

// Counting is templated on the number type: int64_t for the exact counts, double for the overflow
// check in validate() (a config with absurd sizes must be refused, not overflow).
template <typename T>
T attention_params_per_layer(const ModelConfig& c) {
  const T d = c.hidden_size;
  const T h = c.num_heads;
  if (c.mla.kv_lora_rank > 0) {
    const T nope = c.mla.qk_nope_head_dim;
    const T rope = c.mla.qk_rope_head_dim;
    const T v = c.mla.v_head_dim;
    const T kv_rank = c.mla.kv_lora_rank;
    const T q_rank = c.mla.q_lora_rank;
    const T q =
        q_rank > 0 ? d * q_rank + q_rank + q_rank * h * (nope + rope) : d * h * (nope + rope);
    const T kv_a = d * (kv_rank + rope) + kv_rank;  // + kv_a_layernorm
    const T kv_b = kv_rank * h * (nope + v);
    return q + kv_a + kv_b + h * v * d;
  }
  const T q = h * static_cast<T>(c.head_dim);
  const T kv = static_cast<T>(c.num_kv_heads) * static_cast<T>(c.head_dim);
  T p = d * (q + 2 * kv) + q * d;
  if (c.attention_bias) p += q + 2 * kv;
  return p;
}

// MLP parameters of one dense layer, or of one MoE layer (all experts, or only those one token
// uses).
template <typename T>
T mlp_params_per_layer(const ModelConfig& c, bool dense, bool active_only) {
  const T d = c.hidden_size;
  if (dense) return 3 * d * static_cast<T>(c.intermediate_size);
  const T expert = 3 * d * static_cast<T>(c.moe.expert_intermediate_size);
  const T routed = active_only ? c.moe.experts_per_token : c.moe.num_experts;
  return (routed + static_cast<T>(c.moe.num_shared_experts)) * expert +
         d * static_cast<T>(c.moe.num_experts);  // + router
}

template <typename T>
T count_parameters(const ModelConfig& c, bool decode_streamed) {
  const T d = c.hidden_size;
  const T embedding = static_cast<T>(c.vocab_size) * d;
  T p = 0;
  if (decode_streamed) {
    p = embedding + 2 * d;  // lm_head + final norm + one embedding row
  } else {
    p = embedding + d + (c.tie_word_embeddings ? 0 : embedding);  // + final norm, + lm_head
  }
  const T layers = c.num_layers;
  const T dense_layers =
      c.moe.num_experts == 0
          ? layers
          : std::min(layers, static_cast<T>(std::max(0, c.moe.first_dense_layers)));
  const T norms = d * (c.sandwich_norms ? 4 : 2);
  p += layers * (attention_params_per_layer<T>(c) + norms);
  p += dense_layers * mlp_params_per_layer<T>(c, true, decode_streamed);
  p += (layers - dense_layers) * mlp_params_per_layer<T>(c, false, decode_streamed);
  return p;
}

template <typename T>
T kv_elements_per_token(const ModelConfig& c) {
  const KvEntryShape e = c.kv_entry();
  return static_cast<T>(c.num_layers) * static_cast<T>(e.heads) * static_cast<T>(e.width) *
         static_cast<T>(e.separate_v ? 2 : 1);
}

}  // namespace

int64_t ModelConfig::parameter_count() const {
  return count_parameters<int64_t>(*this, false);
}

int64_t ModelConfig::decode_streamed_parameter_count() const {
  return count_parameters<int64_t>(*this, true);
}

KvEntryShape ModelConfig::kv_entry() const {
  if (mla.kv_lora_rank > 0) return {1, mla.kv_lora_rank + mla.qk_rope_head_dim, false};
  return {num_kv_heads, head_dim, true};
}

int64_t ModelConfig::gqa_kv_bytes_per_token(DType dtype) const {
  if (mla.kv_lora_rank == 0) return kv_bytes_per_token(dtype);
  return int64_t{num_layers} * num_kv_heads * (head_dim + mla.v_head_dim) *
         static_cast<int64_t>(dtype_size(dtype));
}

int64_t ModelConfig::kv_bytes_per_token(DType dtype) const {
  return kv_elements_per_token<int64_t>(*this) * static_cast<int64_t>(dtype_size(dtype));
}

std::vector<std::string> ModelConfig::unsupported_features() const {
  std::vector<std::string> f;
  // Mixtral's routed experts run (engine/arch/mixtral.cpp), and DeepSeek-V2's with its shared
  // experts, dense first layers and multi-head latent attention (engine/arch/deepseek2.cpp).
  const bool deepseek = family == "deepseek_v2";
  if (moe.num_experts > 0 && !deepseek && family != "mixtral") {
    f.push_back("mixture-of-experts (" + std::to_string(moe.num_experts) + " experts, top-" +
                std::to_string(moe.experts_per_token) + ")");
  }
  if (!deepseek && (moe.num_shared_experts > 0 || moe.first_dense_layers > 0)) {
    f.emplace_back("shared experts or dense first layers");
  }
  if (moe.num_experts > 0 && moe.scoring_func != "softmax") {
    f.push_back("router scoring_func '" + moe.scoring_func + "' (the engine runs 'softmax')");
  }
  const bool grouped = deepseek && moe.topk_method == "group_limited_greedy";
  if (moe.num_experts > 0 && moe.topk_method != "greedy" && !grouped) {
    f.push_back("router topk_method '" + moe.topk_method + "' (the engine runs 'greedy'" +
                (deepseek ? std::string(" and 'group_limited_greedy'") : std::string()) + ")");
  }
  if (mla.kv_lora_rank > 0 && !deepseek) f.emplace_back("multi-head latent attention (MLA)");
  if (deepseek && mla.kv_lora_rank == 0) f.emplace_back("DeepSeek-V2 without kv_lora_rank");
  if (deepseek && attention_bias) f.emplace_back("attention biases (attention_bias)");
  // Gemma-2's soft-capping, sandwich norms, scaled embeddings, alternating local/global layers
  // and query_pre_attn_scalar run in its own architecture (engine/arch/gemma2.cpp) only.
  const bool gemma2 = family == "gemma2";
  if (!gemma2 && (attn_logit_softcapping > 0 || final_logit_softcapping > 0)) {
    f.emplace_back("logit soft-capping");
  }
  if (!gemma2 && sandwich_norms) f.emplace_back("post-attention and post-feed-forward norms");
  if (!gemma2 && scale_embeddings) f.emplace_back("scaled embeddings");
  if (!gemma2 && alternating_sliding_window) {
    f.emplace_back("alternating local/global attention layers");
  }
  if (!gemma2 && query_pre_attn_scalar > 0 && static_cast<int>(query_pre_attn_scalar) != head_dim) {
    f.emplace_back("query_pre_attn_scalar");
  }
  const std::string runs_act = gemma2 ? "gelu_pytorch_tanh" : "silu";
  if (hidden_act != runs_act) {
    f.push_back("activation '" + hidden_act + "' (the engine runs '" + runs_act + "' for " +
                family + ")");
  }
  if (mlp_bias) f.emplace_back("MLP biases (mlp_bias)");
  if (partial_rotary_factor != 1.0) {
    f.push_back("partial rotary embeddings (partial_rotary_factor " +
                std::to_string(partial_rotary_factor) + ")");
  }
  const bool yarn = deepseek && rope_scaling.type == "yarn";  // engine/rope.cpp
  if (rope_scaling.type != "none" && rope_scaling.type != "llama3" &&
      rope_scaling.type != "linear" && !yarn) {
    f.push_back("rope scaling '" + rope_scaling.type + "'");
  }
  return f;
}

Status ModelConfig::check_supported() const {
  const auto f = unsupported_features();
  if (f.empty()) return Ok{};
  std::string list;
  for (const auto& s : f) list += (list.empty() ? "" : ", ") + s;
  return user_error("model '" + name + "' (" + family + ") needs " + list +
                    ", which the engine cannot run yet; `inferbench models` marks the runnable "
                    "presets");
}

Status ModelConfig::validate() const {
  auto positive = [&](int v, const char* field) -> Status {
    if (v > 0) return Ok{};
    return user_error("model '" + name + "': " + field + " must be positive (got " +
                      std::to_string(v) + ")");
  };
  IB_TRY(positive(vocab_size, "vocab_size"));
  IB_TRY(positive(hidden_size, "hidden_size"));
  IB_TRY(positive(intermediate_size, "intermediate_size"));
  IB_TRY(positive(num_layers, "num_hidden_layers"));
  IB_TRY(positive(num_heads, "num_attention_heads"));
  IB_TRY(positive(num_kv_heads, "num_key_value_heads"));
  IB_TRY(positive(head_dim, "head_dim"));
  IB_TRY(positive(max_position_embeddings, "max_position_embeddings"));
  auto non_negative = [&](int v, const char* field) -> Status {
    if (v >= 0) return Ok{};
    return user_error("model '" + name + "': " + field + " must not be negative (got " +
                      std::to_string(v) + ")");
  };
  IB_TRY(non_negative(moe.num_experts, "num_experts"));
  IB_TRY(non_negative(moe.experts_per_token, "num_experts_per_tok"));
  IB_TRY(non_negative(moe.expert_intermediate_size, "moe_intermediate_size"));
  IB_TRY(non_negative(moe.num_shared_experts, "n_shared_experts"));
  IB_TRY(non_negative(moe.first_dense_layers, "first_k_dense_replace"));
  IB_TRY(non_negative(mla.kv_lora_rank, "kv_lora_rank"));
  IB_TRY(non_negative(mla.q_lora_rank, "q_lora_rank"));
  IB_TRY(non_negative(mla.qk_nope_head_dim, "qk_nope_head_dim"));
  IB_TRY(non_negative(mla.qk_rope_head_dim, "qk_rope_head_dim"));
  IB_TRY(non_negative(mla.v_head_dim, "v_head_dim"));
  if (moe.num_experts > 0 && moe.experts_per_token < 1) {
    return user_error("model '" + name + "': a mixture-of-experts model needs " +
                      "num_experts_per_tok of at least 1 (got " +
                      std::to_string(moe.experts_per_token) + ")");
  }
  if (moe.experts_per_token > moe.num_experts) {
    return user_error("model '" + name + "': num_experts_per_tok (" +
                      std::to_string(moe.experts_per_token) + ") exceeds the number of experts (" +
                      std::to_string(moe.num_experts) + ")");
  }
  // Sizes are computed in int64: refuse configs whose totals would not fit (far beyond any model).
  constexpr double kMaxCount = 1e15;
  if (count_parameters<double>(*this, false) > kMaxCount ||
      kv_elements_per_token<double>(*this) > kMaxCount) {
    return user_error("model '" + name +
                      "': sizes imply more than 10^15 parameters or KV elements "
                      "per token; check the config's dimensions");
  }
  if (num_heads % num_kv_heads != 0) {
    return user_error("model '" + name + "': num_attention_heads (" + std::to_string(num_heads) +
                      ") is not a multiple of num_key_value_heads (" +
                      std::to_string(num_kv_heads) + ")");
  }
  // DeepSeek-V2's group-limited routing (another family naming it is refused by
  // unsupported_features, with the name).
  if (family == "deepseek_v2" && moe.topk_method == "group_limited_greedy" &&
      (moe.num_groups < 1 || moe.topk_groups < 1 || moe.topk_groups > moe.num_groups ||
       moe.num_experts % moe.num_groups != 0 ||
       int64_t{moe.topk_groups} * (moe.num_experts / moe.num_groups) < moe.experts_per_token)) {
    return user_error("model '" + name + "': topk_method group_limited_greedy needs n_group (" +
                      std::to_string(moe.num_groups) + ") dividing n_routed_experts (" +
                      std::to_string(moe.num_experts) + ") and topk_group (" +
                      std::to_string(moe.topk_groups) +
                      ") between 1 and n_group, its groups holding at least "
                      "num_experts_per_tok experts");
  }
  if (mla.kv_lora_rank > 0 && (mla.qk_rope_head_dim % 2 != 0 || mla.qk_rope_head_dim <= 0 ||
                               mla.qk_nope_head_dim <= 0 || mla.v_head_dim <= 0)) {
    return user_error("model '" + name +
                      "': multi-head latent attention needs positive qk_nope_head_dim and "
                      "v_head_dim and an even qk_rope_head_dim");
  }
  if (mla.kv_lora_rank == 0 && head_dim % 2 != 0) {
    return user_error("model '" + name + "': head_dim must be even for rotary embeddings");
  }
  if (rms_norm_eps <= 0) return user_error("model '" + name + "': rms_norm_eps must be positive");
  if (rope_theta <= 0) return user_error("model '" + name + "': rope_theta must be positive");
  return Ok{};
}

}  // namespace ib
