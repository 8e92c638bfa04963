#include "model/config.h"

#include <string>

namespace ib {
namespace {

int64_t attention_params_per_layer(const ModelConfig& c) {
  const int64_t d = c.hidden_size;
  if (c.mla.kv_lora_rank > 0) {
    const auto& m = c.mla;
    const int64_t qk_dim = m.qk_nope_head_dim + m.qk_rope_head_dim;
    const int64_t h = c.num_heads;
    int64_t q = 0;
    if (m.q_lora_rank > 0) {
      q = d * m.q_lora_rank + m.q_lora_rank + int64_t{m.q_lora_rank} * h * qk_dim;
    } else {
      q = d * h * qk_dim;
    }
    const int64_t kv_a = d * (m.kv_lora_rank + m.qk_rope_head_dim) + m.kv_lora_rank;
    const int64_t kv_b = int64_t{m.kv_lora_rank} * h * (m.qk_nope_head_dim + m.v_head_dim);
    const int64_t o = h * m.v_head_dim * d;
    return q + kv_a + kv_b + o;
  }
  const int64_t q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim;
  int64_t p = d * (q + 2 * kv) + q * d;
  if (c.attention_bias) p += q + 2 * kv;
  return p;
}

// MLP parameters of one layer: all of them, or only those one token uses (active experts).
int64_t mlp_params_per_layer(const ModelConfig& c, int layer, bool active_only) {
  const int64_t d = c.hidden_size;
  const bool dense = c.moe.num_experts == 0 || layer < c.moe.first_dense_layers;
  if (dense) return 3 * d * c.intermediate_size;
  const int64_t expert = 3 * d * c.moe.expert_intermediate_size;
  const int64_t routed = active_only ? c.moe.experts_per_token : c.moe.num_experts;
  return (routed + c.moe.num_shared_experts) * expert + d * c.moe.num_experts;  // + router
}

int64_t norm_params_per_layer(const ModelConfig& c) {
  return int64_t{c.hidden_size} * (c.sandwich_norms ? 4 : 2);
}

}  // namespace

int64_t ModelConfig::parameter_count() const {
  const int64_t d = hidden_size;
  int64_t p = int64_t{vocab_size} * d + d;  // embedding + final norm
  if (!tie_word_embeddings) p += int64_t{vocab_size} * d;
  for (int l = 0; l < num_layers; ++l) {
    p += attention_params_per_layer(*this) + mlp_params_per_layer(*this, l, false) +
         norm_params_per_layer(*this);
  }
  return p;
}

int64_t ModelConfig::decode_streamed_parameter_count() const {
  const int64_t d = hidden_size;
  int64_t p = int64_t{vocab_size} * d + d + d;  // lm_head + final norm + one embedding row
  for (int l = 0; l < num_layers; ++l) {
    p += attention_params_per_layer(*this) + mlp_params_per_layer(*this, l, true) +
         norm_params_per_layer(*this);
  }
  return p;
}

int64_t ModelConfig::kv_bytes_per_token(DType dtype) const {
  const auto elem = static_cast<int64_t>(dtype_size(dtype));
  if (mla.kv_lora_rank > 0) {
    return int64_t{num_layers} * (mla.kv_lora_rank + mla.qk_rope_head_dim) * elem;
  }
  return 2 * int64_t{num_layers} * num_kv_heads * head_dim * elem;
}

std::vector<std::string> ModelConfig::unsupported_features() const {
  std::vector<std::string> f;
  if (moe.num_experts > 0) {
    f.push_back("mixture-of-experts (" + std::to_string(moe.num_experts) + " experts, top-" +
                std::to_string(moe.experts_per_token) + ")");
  }
  if (mla.kv_lora_rank > 0) f.emplace_back("multi-head latent attention (MLA)");
  if (attn_logit_softcapping > 0 || final_logit_softcapping > 0) {
    f.emplace_back("logit soft-capping");
  }
  if (sandwich_norms) f.emplace_back("post-attention and post-feed-forward norms");
  if (scale_embeddings) f.emplace_back("scaled embeddings");
  if (alternating_sliding_window) f.emplace_back("alternating local/global attention layers");
  if (query_pre_attn_scalar > 0 && static_cast<int>(query_pre_attn_scalar) != head_dim) {
    f.emplace_back("query_pre_attn_scalar");
  }
  if (hidden_act != "silu") f.push_back("activation '" + hidden_act + "'");
  if (rope_scaling.type != "none" && rope_scaling.type != "llama3" &&
      rope_scaling.type != "linear") {
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
  if (num_heads % num_kv_heads != 0) {
    return user_error("model '" + name + "': num_attention_heads (" + std::to_string(num_heads) +
                      ") is not a multiple of num_key_value_heads (" +
                      std::to_string(num_kv_heads) + ")");
  }
  if (mla.kv_lora_rank == 0 && head_dim % 2 != 0) {
    return user_error("model '" + name + "': head_dim must be even for rotary embeddings");
  }
  if (rms_norm_eps <= 0) return user_error("model '" + name + "': rms_norm_eps must be positive");
  if (rope_theta <= 0) return user_error("model '" + name + "': rope_theta must be positive");
  return Ok{};
}

}  // namespace ib
