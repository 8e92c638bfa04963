// Hugging Face config.json -> ModelConfig. Absent fields take the defaults of the matching
// transformers config class (LlamaConfig, MistralConfig, Qwen2Config, Phi3Config, Gemma2Config,
// MixtralConfig, DeepseekV2Config), so a file means what it means to transformers.
#include "model/hf_config.h"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/fs.h"
#include "model/detail/json_fields.h"
#include "model/detail/quantization_config.h"

namespace ib {
namespace {

using Json = nlohmann::json;
using detail::JsonFields;

struct FamilyInfo {
  const char* model_type;
  const char* architecture;
  double default_rms_eps;
  bool default_tie;
  int default_sliding_window;  // class default when the key is absent (null in the file: 0)
};

constexpr FamilyInfo kFamilies[] = {
    {"llama", "LlamaForCausalLM", 1e-6, false, 0},
    {"mistral", "MistralForCausalLM", 1e-6, false, 4096},
    {"qwen2", "Qwen2ForCausalLM", 1e-6, false, 4096},
    {"phi3", "Phi3ForCausalLM", 1e-5, false, 0},
    {"gemma2", "Gemma2ForCausalLM", 1e-6, true, 4096},
    {"mixtral", "MixtralForCausalLM", 1e-5, false, 0},
    {"deepseek_v2", "DeepseekV2ForCausalLM", 1e-6, false, 0},
};

Result<const FamilyInfo*> find_family(const JsonFields& f) {
  std::string architecture;
  if (const auto it = f.json().find("architectures"); it != f.json().end() && !it->is_null()) {
    if (!it->is_array() || it->empty() || !(*it)[0].is_string()) {
      return f.error("\"architectures\" must be a non-empty list of strings");
    }
    architecture = (*it)[0].get<std::string>();
  }
  IB_ASSIGN_OR_RETURN(const std::string model_type, f.optional_string("model_type", ""));
  for (const auto& family : kFamilies) {
    if (architecture == family.architecture) return &family;
  }
  if (architecture.empty()) {
    for (const auto& family : kFamilies) {
      if (model_type == family.model_type) return &family;
    }
  }
  if (architecture.empty() && model_type.empty()) {
    return f.error("missing \"architectures\" and \"model_type\"; is this a model's config.json?");
  }
  return f.error("architecture '" + (architecture.empty() ? model_type : architecture) +
                 "' is not supported; inferbench reads Llama, Mistral, Qwen2, Phi-3, Gemma-2, "
                 "Mixtral and DeepSeek-V2 configs");
}

// An int, or a list of ints (the first matters to nobody: all are end tokens).
Status read_token_ids(const JsonFields& f, const char* key, std::vector<int>& out) {
  const auto it = f.json().find(key);
  if (it == f.json().end() || it->is_null()) return Ok{};
  if (it->is_array()) {
    for (const auto& v : *it) {
      if (!v.is_number_integer()) return f.error(std::string("\"") + key + "\" must hold integers");
      out.push_back(static_cast<int>(v.get<int64_t>()));
    }
    return Ok{};
  }
  IB_ASSIGN_OR_RETURN(const int id, f.optional_int(key, -1));
  out.push_back(id);
  return Ok{};
}

Result<DType> read_dtype(const JsonFields& f) {
  const char* key = f.has("torch_dtype") ? "torch_dtype" : "dtype";  // transformers >= 4.56: dtype
  IB_ASSIGN_OR_RETURN(const std::string s, f.optional_string(key, "float32"));
  if (s == "bfloat16") return DType::kBF16;
  if (s == "float16") return DType::kF16;
  if (s == "float32") return DType::kF32;
  return f.error(std::string("\"") + key + "\" is '" + s +
                 "'; expected bfloat16, float16 or float32");
}

// rope_scaling (or rope_parameters, which also carries rope_theta in recent transformers).
Status read_rope(const JsonFields& f, ModelConfig& c) {
  IB_ASSIGN_OR_RETURN(c.rope_theta, f.optional_number("rope_theta", 10000.0));
  IB_ASSIGN_OR_RETURN(auto scaling, f.optional_object("rope_scaling"));
  if (!scaling) {
    IB_ASSIGN_OR_RETURN(scaling, f.optional_object("rope_parameters"));
    if (scaling) {
      IB_ASSIGN_OR_RETURN(c.rope_theta, scaling->optional_number("rope_theta", c.rope_theta));
    }
  }
  if (!scaling) return Ok{};
  IB_ASSIGN_OR_RETURN(std::string type, scaling->optional_string("type", "default"));
  IB_ASSIGN_OR_RETURN(type, scaling->optional_string("rope_type", type));
  if (type == "su") type = "longrope";  // early Phi-3 128k name
  // Qwen2-VL's "mrope" is default RoPE split into sections (mrope_section, read by its reader).
  c.rope_scaling.type = type == "default" || type == "mrope" ? "none" : type;
  RopeScaling& r = c.rope_scaling;
  IB_ASSIGN_OR_RETURN(r.factor, scaling->optional_number("factor", 1.0));
  IB_ASSIGN_OR_RETURN(r.low_freq_factor, scaling->optional_number("low_freq_factor", 1.0));
  IB_ASSIGN_OR_RETURN(r.high_freq_factor, scaling->optional_number("high_freq_factor", 4.0));
  IB_ASSIGN_OR_RETURN(r.original_max_position_embeddings,
                      scaling->optional_int("original_max_position_embeddings", 0));
  IB_ASSIGN_OR_RETURN(r.attention_factor, scaling->optional_number("attention_factor", 0));
  IB_ASSIGN_OR_RETURN(r.mscale, scaling->optional_number("mscale", 0));
  IB_ASSIGN_OR_RETURN(r.mscale_all_dim, scaling->optional_number("mscale_all_dim", 0));
  IB_ASSIGN_OR_RETURN(r.beta_fast, scaling->optional_number("beta_fast", 32));
  IB_ASSIGN_OR_RETURN(r.beta_slow, scaling->optional_number("beta_slow", 1));
  IB_ASSIGN_OR_RETURN(r.truncate, scaling->optional_bool("truncate", true));
  if (r.type == "yarn" && r.original_max_position_embeddings <= 0) {
    // transformers' default: the model's own context
    IB_ASSIGN_OR_RETURN(r.original_max_position_embeddings,
                        f.optional_int("max_position_embeddings", 0));
  }
  if (r.type == "llama3" && r.original_max_position_embeddings <= 0) {
    return scaling->error("llama3 rope scaling needs \"original_max_position_embeddings\"");
  }
  return Ok{};
}

Status read_family_features(const JsonFields& f, const FamilyInfo& family, ModelConfig& c) {
  const std::string type = family.model_type;
  if (type == "gemma2") {
    IB_ASSIGN_OR_RETURN(c.hidden_act, f.optional_string("hidden_activation", c.hidden_act));
    IB_ASSIGN_OR_RETURN(c.attn_logit_softcapping, f.optional_number("attn_logit_softcapping", 0));
    IB_ASSIGN_OR_RETURN(c.final_logit_softcapping, f.optional_number("final_logit_softcapping", 0));
    IB_ASSIGN_OR_RETURN(c.query_pre_attn_scalar, f.optional_number("query_pre_attn_scalar", 256));
    c.sandwich_norms = true;
    c.scale_embeddings = true;
    c.alternating_sliding_window = c.sliding_window > 0;
    // transformers 4.53+ writes the pattern out: even layers "sliding_attention", odd layers
    // "full_attention" (Gemma2Config's default); another pattern is not what the engine runs.
    if (const auto it = f.json().find("layer_types"); it != f.json().end() && it->is_array()) {
      for (size_t i = 0; i < it->size(); ++i) {
        const std::string want = i % 2 == 0 ? "sliding_attention" : "full_attention";
        if (!(*it)[i].is_string() || (*it)[i].get<std::string>() != want) {
          return f.error("\"layer_types\"[" + std::to_string(i) + "] is not \"" + want +
                         "\": the engine runs Gemma-2's alternating pattern only (even layers "
                         "sliding_attention, odd layers full_attention)");
        }
      }
    }
  } else if (type == "mixtral") {
    IB_ASSIGN_OR_RETURN(c.moe.num_experts, f.optional_int("num_local_experts", 8));
    IB_ASSIGN_OR_RETURN(c.moe.experts_per_token, f.optional_int("num_experts_per_tok", 2));
    c.moe.expert_intermediate_size = c.intermediate_size;
    // MixtralConfig has no router keys (softmax, greedy top-k, renormalised); a file that names
    // others means another router, refused (unsupported_features) with the name it gives.
    IB_ASSIGN_OR_RETURN(c.moe.scoring_func, f.optional_string("scoring_func", "softmax"));
    IB_ASSIGN_OR_RETURN(c.moe.topk_method, f.optional_string("topk_method", "greedy"));
  } else if (type == "deepseek_v2") {
    IB_ASSIGN_OR_RETURN(c.moe.num_experts, f.optional_int("n_routed_experts", 0));
    IB_ASSIGN_OR_RETURN(c.moe.experts_per_token, f.optional_int("num_experts_per_tok", 0));
    IB_ASSIGN_OR_RETURN(c.moe.expert_intermediate_size, f.optional_int("moe_intermediate_size", 0));
    IB_ASSIGN_OR_RETURN(c.moe.num_shared_experts, f.optional_int("n_shared_experts", 0));
    IB_ASSIGN_OR_RETURN(c.moe.first_dense_layers, f.optional_int("first_k_dense_replace", 0));
    IB_ASSIGN_OR_RETURN(c.moe.scoring_func, f.optional_string("scoring_func", "softmax"));
    IB_ASSIGN_OR_RETURN(c.moe.topk_method, f.optional_string("topk_method", "greedy"));
    IB_ASSIGN_OR_RETURN(c.moe.norm_topk_prob, f.optional_bool("norm_topk_prob", false));
    IB_ASSIGN_OR_RETURN(c.moe.routed_scaling_factor,
                        f.optional_number("routed_scaling_factor", 1.0));
    IB_ASSIGN_OR_RETURN(c.moe.num_groups, f.optional_int("n_group", 0));
    IB_ASSIGN_OR_RETURN(c.moe.topk_groups, f.optional_int("topk_group", 0));
    IB_ASSIGN_OR_RETURN(c.mla.kv_lora_rank, f.optional_int("kv_lora_rank", 512));
    IB_ASSIGN_OR_RETURN(c.mla.q_lora_rank, f.optional_int("q_lora_rank", 0));
    IB_ASSIGN_OR_RETURN(c.mla.qk_nope_head_dim, f.optional_int("qk_nope_head_dim", 128));
    IB_ASSIGN_OR_RETURN(c.mla.qk_rope_head_dim, f.optional_int("qk_rope_head_dim", 64));
    IB_ASSIGN_OR_RETURN(c.mla.v_head_dim, f.optional_int("v_head_dim", 128));
    c.head_dim = c.mla.qk_nope_head_dim + c.mla.qk_rope_head_dim;  // query/key head size
  }
  return Ok{};
}

Result<ModelConfig> read_config(const JsonFields& f, const std::string& name) {
  IB_ASSIGN_OR_RETURN(const FamilyInfo* family, find_family(f));
  ModelConfig c;
  c.name = name;
  c.family = family->model_type;
  c.hf_architecture = family->architecture;
  IB_ASSIGN_OR_RETURN(c.vocab_size, f.required_int("vocab_size"));
  IB_ASSIGN_OR_RETURN(c.hidden_size, f.required_int("hidden_size"));
  IB_ASSIGN_OR_RETURN(c.intermediate_size, f.required_int("intermediate_size"));
  IB_ASSIGN_OR_RETURN(c.num_layers, f.required_int("num_hidden_layers"));
  IB_ASSIGN_OR_RETURN(c.num_heads, f.required_int("num_attention_heads"));
  IB_ASSIGN_OR_RETURN(c.max_position_embeddings, f.required_int("max_position_embeddings"));
  IB_ASSIGN_OR_RETURN(c.num_kv_heads, f.optional_int("num_key_value_heads", c.num_heads));
  if (c.num_heads <= 0) return f.error("\"num_attention_heads\" must be positive");
  IB_ASSIGN_OR_RETURN(c.head_dim, f.optional_int("head_dim", c.hidden_size / c.num_heads));
  IB_TRY(read_rope(f, c));
  IB_ASSIGN_OR_RETURN(c.rms_norm_eps, f.optional_number("rms_norm_eps", family->default_rms_eps));
  IB_ASSIGN_OR_RETURN(c.tie_word_embeddings,
                      f.optional_bool("tie_word_embeddings", family->default_tie));
  IB_ASSIGN_OR_RETURN(c.attention_bias, f.optional_bool("attention_bias", false));
  if (c.family == "qwen2") c.attention_bias = true;  // Qwen2 always biases q/k/v
  IB_ASSIGN_OR_RETURN(c.mlp_bias, f.optional_bool("mlp_bias", false));
  IB_ASSIGN_OR_RETURN(c.partial_rotary_factor, f.optional_number("partial_rotary_factor", 1.0));
  const bool window_key_present = f.json().contains("sliding_window");
  IB_ASSIGN_OR_RETURN(
      c.sliding_window,
      f.optional_int("sliding_window", window_key_present ? 0 : family->default_sliding_window));
  IB_ASSIGN_OR_RETURN(const bool use_window, f.optional_bool("use_sliding_window", false));
  if (c.family == "qwen2" && !use_window) c.sliding_window = 0;
  IB_ASSIGN_OR_RETURN(c.hidden_act, f.optional_string("hidden_act", "silu"));
  IB_ASSIGN_OR_RETURN(c.bos_token_id, f.optional_int("bos_token_id", -1));
  IB_TRY(read_token_ids(f, "eos_token_id", c.eos_token_ids));
  IB_ASSIGN_OR_RETURN(c.torch_dtype, read_dtype(f));
  IB_TRY(read_family_features(f, *family, c));
  IB_TRY(detail::read_quantization_config(f, c.quantization));
  const Status valid = c.validate();
  if (!valid.ok()) return f.error(valid.error().message);
  return c;
}

// LlavaForConditionalGeneration: its language model is text_config, a Llama whose absent fields
// take LlamaConfig's defaults (llava-hf's files give only what differs from them).
Result<ModelConfig> read_llava_text_config(const Json& root, const std::string& where,
                                           const std::string& name) {
  const auto text = root.find("text_config");
  if (text == root.end() || !text->is_object()) {
    return user_error(where +
                      ": a LlavaForConditionalGeneration config needs a \"text_config\" "
                      "object (the language model's)");
  }
  Json merged = {{"architectures", Json::array({"LlamaForCausalLM"})},
                 {"model_type", "llama"},
                 {"vocab_size", 32000},
                 {"hidden_size", 4096},
                 {"intermediate_size", 11008},
                 {"num_hidden_layers", 32},
                 {"num_attention_heads", 32},
                 {"max_position_embeddings", 2048},
                 {"rms_norm_eps", 1e-6}};
  for (const auto& [key, value] : text->items()) merged[key] = value;
  if (merged["model_type"] != "llama") {
    return user_error(where + ": text_config.model_type " + merged["model_type"].dump() +
                      " is not supported in a LLaVA checkpoint; inferbench runs Llama ones");
  }
  merged["architectures"] = Json::array({"LlamaForCausalLM"});
  IB_ASSIGN_OR_RETURN(ModelConfig c, read_config(JsonFields(merged, where + " text_config"), name));
  c.hf_architecture = "LlavaForConditionalGeneration";
  return c;
}

// Qwen2VLForConditionalGeneration: its language model is a Qwen2 with multimodal RoPE, in
// text_config (transformers 5) or at the top level (the published files; Qwen2VLConfig reads
// them so for backward compatibility), absent fields taking Qwen2VLTextConfig's defaults.
Result<ModelConfig> read_qwen2vl_text_config(const Json& root, const std::string& where,
                                             const std::string& name) {
  Json merged = {{"vocab_size", 152064},
                 {"hidden_size", 8192},
                 {"intermediate_size", 29568},
                 {"num_hidden_layers", 80},
                 {"num_attention_heads", 64},
                 {"num_key_value_heads", 8},
                 {"max_position_embeddings", 32768},
                 {"rms_norm_eps", 1e-5},
                 {"rope_theta", 1000000.0}};
  const auto text = root.find("text_config");
  if (text != root.end() && !text->is_object()) {
    return user_error(where + ": \"text_config\" must be an object (the language model's)");
  }
  const Json& fields = text != root.end() ? *text : root;
  for (const auto& [key, value] : fields.items()) {
    if (key != "vision_config" && key != "text_config") merged[key] = value;
  }
  if (!fields.contains("tie_word_embeddings") && root.contains("tie_word_embeddings")) {
    merged["tie_word_embeddings"] = root["tie_word_embeddings"];  // kept at the top level
  }
  merged["architectures"] = Json::array({"Qwen2ForCausalLM"});
  merged["model_type"] = "qwen2";
  const std::string text_where = where + (text != root.end() ? " text_config" : "");
  IB_ASSIGN_OR_RETURN(ModelConfig c, read_config(JsonFields(merged, text_where), name));
  c.family = "qwen2_vl";
  c.hf_architecture = "Qwen2VLForConditionalGeneration";
  const Json* rope = nullptr;
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (rope == nullptr && merged.contains(key) && merged[key].is_object()) rope = &merged[key];
  }
  const Json* section =
      rope != nullptr && rope->contains("mrope_section") ? &(*rope)["mrope_section"] : nullptr;
  if (section == nullptr) {
    return user_error(text_where +
                      ": rope_scaling has no \"mrope_section\"; a Qwen2-VL config gives its "
                      "temporal, height and width sections (e.g. [16, 24, 24])");
  }
  int sum = 0;
  if (section->is_array() && section->size() == 3) {
    for (const auto& v : *section) {
      if (!v.is_number_integer() || v.get<int>() < 0) break;
      c.mrope_section.push_back(v.get<int>());
      sum += v.get<int>();
    }
  }
  if (c.mrope_section.size() != 3 || sum != c.head_dim / 2) {
    return user_error(text_where + ": mrope_section " + section->dump() +
                      " must be three non-negative integers summing to head_dim / 2 = " +
                      std::to_string(c.head_dim / 2));
  }
  return c;
}

}  // namespace

Result<ModelConfig> parse_hf_config(std::string_view json, const std::string& name) {
  const std::string where = name + "/config.json";
  const Json root = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return user_error(where + " is not valid JSON; re-download it");
  if (!root.is_object()) return user_error(where + " is not a JSON object");
  try {
    const auto arch = root.find("architectures");
    if (arch != root.end() && arch->is_array() && !arch->empty() &&
        (*arch)[0] == "LlavaForConditionalGeneration") {
      return read_llava_text_config(root, where, name);
    }
    if (arch != root.end() && arch->is_array() && !arch->empty() &&
        (*arch)[0] == "Qwen2VLForConditionalGeneration") {
      return read_qwen2vl_text_config(root, where, name);
    }
    return read_config(JsonFields(root, where), name);
  } catch (const Json::exception& e) {  // defensive: every access above is type-checked
    return user_error(where + ": " + e.what());
  }
}

Result<ModelConfig> load_hf_config(const std::string& dir) {
  IB_ASSIGN_OR_RETURN(const std::string text,
                      read_file(std::filesystem::path(dir) / "config.json"));
  return parse_hf_config(text, dir);
}

}  // namespace ib
