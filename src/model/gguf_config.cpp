// GGUF metadata -> ModelConfig, and GGUF tensor names -> HF names and engine roles (gguf_model.h).
#include <charconv>
#include <limits>

#include <fmt/format.h>

#include "model/gguf_model.h"

namespace ib {
namespace {

struct Arch {
  std::string_view name;  // general.architecture
  const char* hf_architecture;
  double default_rms_eps;
};

constexpr Arch kArchs[] = {
    {"llama", "LlamaForCausalLM", 1e-5},
    {"qwen2", "Qwen2ForCausalLM", 1e-6},
    {"phi3", "Phi3ForCausalLM", 1e-5},
};
constexpr std::string_view kSupportedArchs = "llama, qwen2, phi3";

// Typed reads of one file's keys, with errors naming the file and the key.
class Keys {
 public:
  Keys(const GgufFile& file, const std::string& name) : file_(file), name_(name) {}

  Error error(std::string_view key, std::string_view what) const {
    return user_error(fmt::format("{}: GGUF metadata '{}' {}", name_, key, what));
  }
  Result<std::string> string(std::string_view key) const {
    const GgufValue* v = file_.find(key);
    if (v == nullptr) return error(key, "is missing");
    if (v->as_string() == nullptr) return error(key, "must be a string");
    return *v->as_string();
  }
  // A positive int; absent: fallback (or an error when fallback is nullopt).
  Result<int> count(std::string_view key, std::optional<int> fallback = std::nullopt) const {
    const GgufValue* v = file_.find(key);
    if (v == nullptr) {
      if (fallback) return *fallback;
      return error(key, "is missing");
    }
    const auto n = v->as_int();
    if (!n || *n <= 0 || *n > std::numeric_limits<int32_t>::max()) {
      return error(key, "must be a positive integer");
    }
    return static_cast<int>(*n);
  }
  Result<double> number(std::string_view key, double fallback) const {
    const GgufValue* v = file_.find(key);
    if (v == nullptr) return fallback;
    const auto x = v->as_number();
    if (!x) return error(key, "must be a number");
    return *x;
  }
  // A token id (>= 0), or -1 when absent.
  Result<int> token_id(std::string_view key) const {
    const GgufValue* v = file_.find(key);
    if (v == nullptr) return -1;
    const auto n = v->as_int();
    if (!n || *n < 0 || *n > std::numeric_limits<int32_t>::max()) {
      return error(key, "must be a token id");
    }
    return static_cast<int>(*n);
  }

 private:
  const GgufFile& file_;
  const std::string& name_;
};

Result<int> vocab_size(const GgufFile& file, const Keys& keys, const std::string& arch) {
  if (const GgufValue* tokens = file.find("tokenizer.ggml.tokens")) {
    const GgufArray* a = tokens->as_array();
    if (a == nullptr || a->items.empty()) {
      return keys.error("tokenizer.ggml.tokens", "must be a non-empty array of strings");
    }
    return static_cast<int>(std::min<size_t>(a->items.size(), std::numeric_limits<int>::max()));
  }
  if (file.find(arch + ".vocab_size") != nullptr) return keys.count(arch + ".vocab_size");
  if (const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
      embd != nullptr && embd->dims.size() == 2 && embd->dims[1] > 0 &&
      embd->dims[1] <= std::numeric_limits<int32_t>::max()) {
    return static_cast<int>(embd->dims[1]);
  }
  return keys.error("tokenizer.ggml.tokens",
                    "is missing, and so are " + arch + ".vocab_size and token_embd.weight");
}

DType dtype_of_embedding(const GgufFile& file) {
  const GgufTensorInfo* embd = file.find_tensor("token_embd.weight");
  if (embd != nullptr && embd->type == GgmlType::kF32) return DType::kF32;
  if (embd != nullptr && embd->type == GgmlType::kBF16) return DType::kBF16;
  return DType::kF16;  // llama.cpp's unquantized default; quantized files dequantize to it
}

Status read_rope(const GgufFile& file, const Keys& keys, const std::string& a, ModelConfig& c) {
  for (const char* factors : {"rope_freqs.weight", "rope_factors_long.weight"}) {
    if (file.find_tensor(factors) != nullptr) {
      return keys.error(factors,
                        "(a tensor of RoPE frequency factors: Llama-3.1 / Phi-3 long "
                        "context scaling) is not supported yet; use a model without it");
    }
  }
  IB_ASSIGN_OR_RETURN(c.rope_theta, keys.number(a + ".rope.freq_base", 10000.0));
  if (file.find(a + ".rope.dimension_count") != nullptr && c.head_dim > 0) {
    IB_ASSIGN_OR_RETURN(const int rotated, keys.count(a + ".rope.dimension_count"));
    c.partial_rotary_factor = static_cast<double>(rotated) / c.head_dim;
  }
  if (file.find(a + ".rope.scaling.type") == nullptr) return Ok{};
  IB_ASSIGN_OR_RETURN(const std::string type, keys.string(a + ".rope.scaling.type"));
  if (type == "none") return Ok{};
  if (type != "linear" && type != "yarn") {
    return keys.error(a + ".rope.scaling.type", "is '" + type + "'; expected none, linear or yarn");
  }
  c.rope_scaling.type = type;
  IB_ASSIGN_OR_RETURN(c.rope_scaling.factor, keys.number(a + ".rope.scaling.factor", 1.0));
  IB_ASSIGN_OR_RETURN(c.rope_scaling.original_max_position_embeddings,
                      keys.count(a + ".rope.scaling.original_context_length", 0));
  return Ok{};
}

}  // namespace

Result<ModelConfig> gguf_model_config(const GgufFile& file, const std::string& name) {
  const Keys keys(file, name);
  IB_ASSIGN_OR_RETURN(const std::string arch_name, keys.string("general.architecture"));
  const Arch* arch = nullptr;
  for (const Arch& candidate : kArchs) {
    if (candidate.name == arch_name) arch = &candidate;
  }
  if (arch == nullptr) {
    return keys.error("general.architecture",
                      fmt::format("is '{}', which inferbench cannot run; it reads {}",
                                  arch_name.substr(0, 64), kSupportedArchs));
  }
  const std::string& a = arch_name;
  ModelConfig c;
  c.name = name;
  c.family = arch_name;
  c.hf_architecture = arch->hf_architecture;
  IB_ASSIGN_OR_RETURN(c.max_position_embeddings, keys.count(a + ".context_length"));
  IB_ASSIGN_OR_RETURN(c.hidden_size, keys.count(a + ".embedding_length"));
  IB_ASSIGN_OR_RETURN(c.num_layers, keys.count(a + ".block_count"));
  IB_ASSIGN_OR_RETURN(c.intermediate_size, keys.count(a + ".feed_forward_length"));
  IB_ASSIGN_OR_RETURN(c.num_heads, keys.count(a + ".attention.head_count"));
  IB_ASSIGN_OR_RETURN(c.num_kv_heads, keys.count(a + ".attention.head_count_kv", c.num_heads));
  IB_ASSIGN_OR_RETURN(c.head_dim,
                      keys.count(a + ".attention.key_length", c.hidden_size / c.num_heads));
  IB_ASSIGN_OR_RETURN(c.rms_norm_eps,
                      keys.number(a + ".attention.layer_norm_rms_epsilon", arch->default_rms_eps));
  IB_TRY(read_rope(file, keys, a, c));
  IB_ASSIGN_OR_RETURN(c.sliding_window, keys.count(a + ".attention.sliding_window", 0));
  IB_ASSIGN_OR_RETURN(c.vocab_size, vocab_size(file, keys, a));
  c.tie_word_embeddings = file.find_tensor("output.weight") == nullptr;
  c.attention_bias = file.find_tensor("blk.0.attn_q.bias") != nullptr ||
                     file.find_tensor("blk.0.attn_qkv.bias") != nullptr;
  IB_ASSIGN_OR_RETURN(c.bos_token_id, keys.token_id("tokenizer.ggml.bos_token_id"));
  IB_ASSIGN_OR_RETURN(const int eos, keys.token_id("tokenizer.ggml.eos_token_id"));
  if (eos >= 0) c.eos_token_ids.push_back(eos);
  c.torch_dtype = dtype_of_embedding(file);
  const Status valid = c.validate();
  if (!valid.ok()) return user_error(name + ": " + valid.error().message);
  return c;
}

namespace {

struct NameRule {
  std::string_view gguf;  // after "blk.N." for layer tensors
  std::string_view hf;    // after "model.layers.N." for layer tensors
  std::string_view role;
  std::string_view only_arch;  // "" for all
};

constexpr NameRule kModelRules[] = {
    {"token_embd.weight", "model.embed_tokens.weight", "embed", ""},
    {"output_norm.weight", "model.norm.weight", "final_norm", ""},
    {"output.weight", "lm_head.weight", "lm_head", ""},
};

constexpr NameRule kLayerRules[] = {
    {"attn_norm.weight", "input_layernorm.weight", "attn_norm", ""},
    {"attn_q.weight", "self_attn.q_proj.weight", "qkv", ""},
    {"attn_k.weight", "self_attn.k_proj.weight", "qkv", ""},
    {"attn_v.weight", "self_attn.v_proj.weight", "qkv", ""},
    {"attn_q.bias", "self_attn.q_proj.bias", "qkv_bias", ""},
    {"attn_k.bias", "self_attn.k_proj.bias", "qkv_bias", ""},
    {"attn_v.bias", "self_attn.v_proj.bias", "qkv_bias", ""},
    {"attn_qkv.weight", "self_attn.qkv_proj.weight", "qkv", "phi3"},
    {"attn_output.weight", "self_attn.o_proj.weight", "o", ""},
    {"ffn_norm.weight", "post_attention_layernorm.weight", "ffn_norm", ""},
    {"ffn_gate.weight", "mlp.gate_proj.weight", "gate_up", ""},
    {"ffn_up.weight", "mlp.gate_up_proj.weight", "gate_up", "phi3"},  // phi3: gate and up fused
    {"ffn_up.weight", "mlp.up_proj.weight", "gate_up", ""},
    {"ffn_down.weight", "mlp.down_proj.weight", "down", ""},
};

bool applies(const NameRule& rule, std::string_view arch) {
  return rule.only_arch.empty() || rule.only_arch == arch;
}

}  // namespace

Result<GgufTensorMapping> map_gguf_tensor(std::string_view gguf_name, std::string_view arch) {
  for (const NameRule& rule : kModelRules) {
    if (gguf_name == rule.gguf) return GgufTensorMapping{std::string(rule.hf), rule.role, -1};
  }
  constexpr std::string_view kBlk = "blk.";
  if (gguf_name.substr(0, kBlk.size()) == kBlk) {
    const std::string_view rest = gguf_name.substr(kBlk.size());
    int layer = -1;
    const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), layer);
    if (ec == std::errc() && layer >= 0 && end != rest.data() + rest.size() && *end == '.') {
      const std::string_view suffix(end + 1,
                                    static_cast<size_t>(rest.data() + rest.size() - end - 1));
      for (const NameRule& rule : kLayerRules) {
        if (suffix != rule.gguf || !applies(rule, arch)) continue;
        const bool permuted =
            arch == "llama" && (suffix == "attn_q.weight" || suffix == "attn_k.weight");
        return GgufTensorMapping{fmt::format("model.layers.{}.{}", layer, rule.hf), rule.role,
                                 layer, permuted};
      }
    }
  }
  return user_error(
      fmt::format("GGUF tensor '{}' is not one inferbench reads for {} models "
                  "(token_embd, output_norm, output, blk.N.attn_*, blk.N.ffn_*)",
                  gguf_name.substr(0, 96), arch.substr(0, 32)));
}

int64_t hf_row_of_gguf_rope_row(int64_t gguf_row, int64_t head_dim) {
  // llama.cpp's converter stores HF row (head h, half i, j) at h * head_dim + 2 * j + i.
  const int64_t head = gguf_row / head_dim;
  const int64_t within = gguf_row % head_dim;
  return head * head_dim + (within % 2) * (head_dim / 2) + within / 2;
}

}  // namespace ib
