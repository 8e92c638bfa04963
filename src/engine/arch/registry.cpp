// The families the engine runs (find_architecture) and the schema helpers every family shares.
#include <array>
#include <cmath>

#include "engine/arch/detail/families.h"

namespace ib {

Result<const Architecture*> find_architecture(const ModelConfig& config) {
  const std::array<const Architecture*, 8> families = {
      &arch::llama_architecture(),     &arch::mistral_architecture(), &arch::qwen2_architecture(),
      &arch::phi3_architecture(),      &arch::mixtral_architecture(), &arch::gemma2_architecture(),
      &arch::deepseek2_architecture(), &arch::qwen2vl_architecture()};
  std::string names;
  for (const Architecture* a : families) {
    if (a->name() == config.family) return a;
    names += (names.empty() ? "" : ", ") + std::string(a->name());
  }
  return user_error("model '" + config.name + "': the engine has no architecture for family '" +
                    config.family + "' (" + config.hf_architecture + "); it runs " + names);
}

AttentionShape attention_shape(const ModelConfig& c) {
  AttentionShape s;
  s.num_heads = c.num_heads;
  s.num_kv_heads = c.num_kv_heads;
  s.head_dim = c.head_dim;
  const double scalar = c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : c.head_dim;
  s.scale = static_cast<float>(1.0 / std::sqrt(scalar));
  s.sliding_window = c.sliding_window;
  s.logit_softcap = static_cast<float>(c.attn_logit_softcapping);
  return s;
}

MlaShape mla_shape(const ModelConfig& c) {
  MlaShape s;
  s.num_heads = c.num_heads;
  s.kv_lora_rank = c.mla.kv_lora_rank;
  s.qk_nope_head_dim = c.mla.qk_nope_head_dim;
  s.qk_rope_head_dim = c.mla.qk_rope_head_dim;
  s.v_head_dim = c.mla.v_head_dim;
  s.scale = static_cast<float>(1.0 / std::sqrt(c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim) *
                               mla_softmax_mscale(c));
  s.rope_scale = rope_attention_factor(c);
  return s;
}

std::string_view weight_role_name(WeightRole role) {
  switch (role) {
    case WeightRole::kEmbed:
      return "embed";
    case WeightRole::kFinalNorm:
      return "final_norm";
    case WeightRole::kLmHead:
      return "lm_head";
    case WeightRole::kAttnNorm:
      return "attn_norm";
    case WeightRole::kQkv:
      return "qkv";
    case WeightRole::kQkvBias:
      return "qkv_bias";
    case WeightRole::kO:
      return "o";
    case WeightRole::kFfnNorm:
      return "ffn_norm";
    case WeightRole::kPostAttnNorm:
      return "post_attn_norm";
    case WeightRole::kPostFfnNorm:
      return "post_ffn_norm";
    case WeightRole::kGateUp:
      return "gate_up";
    case WeightRole::kDown:
      return "down";
    case WeightRole::kRouter:
      return "router";
    case WeightRole::kExpertGateUp:
      return "expert_gate_up";
    case WeightRole::kExpertDown:
      return "expert_down";
    case WeightRole::kQA:
      return "q_a";
    case WeightRole::kQANorm:
      return "q_a_norm";
    case WeightRole::kKvA:
      return "kv_a";
    case WeightRole::kKvANorm:
      return "kv_a_norm";
    case WeightRole::kKvB:
      return "kv_b";
    case WeightRole::kSharedGateUp:
      return "shared_gate_up";
    case WeightRole::kSharedDown:
      return "shared_down";
  }
  return "?";
}

Tensor weight_for(ModelWeights& w, WeightRole role, int layer, int expert) {
  IB_ASSERT((layer >= 0) == (role != WeightRole::kEmbed && role != WeightRole::kFinalNorm &&
                             role != WeightRole::kLmHead),
            "weight_for: layer given for a whole-model weight or missing for a layer weight");
  if (layer < 0) {
    if (role == WeightRole::kEmbed) return w.embed;
    return role == WeightRole::kFinalNorm ? w.final_norm : w.lm_head.dense();
  }
  LayerWeights& l = w.layers.at(static_cast<size_t>(layer));
  switch (role) {
    case WeightRole::kAttnNorm:
      return l.attn_norm;
    case WeightRole::kQkv:
      return l.wqkv.dense();
    case WeightRole::kQkvBias:
      return l.bqkv;
    case WeightRole::kO:
      return l.wo.dense();
    case WeightRole::kFfnNorm:
      return l.ffn_norm;
    case WeightRole::kPostAttnNorm:
      return l.post_attn_norm;
    case WeightRole::kPostFfnNorm:
      return l.post_ffn_norm;
    case WeightRole::kGateUp:
      return l.w_gate_up.dense();
    case WeightRole::kDown:
      return l.w_down.dense();
    case WeightRole::kRouter:
      return l.router.dense();
    case WeightRole::kExpertGateUp:
      return l.expert_gate_up.at(static_cast<size_t>(expert)).dense();
    case WeightRole::kExpertDown:
      return l.expert_down.at(static_cast<size_t>(expert)).dense();
    case WeightRole::kQA:
      return l.q_a.dense();
    case WeightRole::kQANorm:
      return l.q_a_norm;
    case WeightRole::kKvA:
      return l.kv_a.dense();
    case WeightRole::kKvANorm:
      return l.kv_a_norm;
    case WeightRole::kKvB:
      return l.kv_b.dense();
    case WeightRole::kSharedGateUp:
      return l.shared_gate_up.dense();
    case WeightRole::kSharedDown:
      return l.shared_down.dense();
    default:
      break;
  }
  IB_ASSERT(false, "weight_for: unknown role");
  return {};
}

bool WeightSchema::ignores(std::string_view name) const {
  for (const std::string& s : ignored_suffixes) {
    if (name.size() >= s.size() && name.substr(name.size() - s.size()) == s) return true;
  }
  return false;
}

std::string WeightSchema::expected_names() const {
  const std::string prefix = "model.layers.0.";
  std::string whole, layer;
  for (const SchemaEntry& e : entries) {
    if (e.layer > 0) continue;
    for (const TensorSource& s : e.sources) {
      std::string& out = e.layer < 0 ? whole : layer;
      out += (out.empty() ? "" : ", ") + (e.layer < 0 ? s.name : s.name.substr(prefix.size()));
    }
  }
  return whole + " and in each model.layers.N: " + layer;
}

}  // namespace ib
