#include "model/hf_config.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "core/fs.h"
#include "model/presets.h"

namespace ib {
namespace {

// config.json files as published on the Hugging Face Hub.
constexpr const char* kLlama3_8B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "hidden_act": "silu", "hidden_size": 4096,
  "initializer_range": 0.02, "intermediate_size": 14336, "max_position_embeddings": 8192,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 500000.0, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.0.dev0", "use_cache": true, "vocab_size": 128256})";

constexpr const char* kLlama32_1B = R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": 128001, "head_dim": 64, "hidden_act": "silu",
  "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 131072, "mlp_bias": false, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})";

constexpr const char* kLlama2_7B = R"({
  "architectures": ["LlamaForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
  "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 11008, "max_position_embeddings": 4096, "model_type": "llama",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
  "pretraining_tp": 1, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "tie_word_embeddings": false, "torch_dtype": "float16", "transformers_version": "4.31.0.dev0",
  "use_cache": true, "vocab_size": 32000})";

constexpr const char* kQwen2_05B = R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 131072, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 131072, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_sliding_window": false,
  "vocab_size": 151936})";

constexpr const char* kMistral7B_v03 = R"({
  "architectures": ["MistralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "sliding_window": null,
  "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.42.0.dev0",
  "use_cache": true, "vocab_size": 32768})";

constexpr const char* kPhi3Mini = R"({
  "_name_or_path": "Phi-3-mini-4k-instruct", "architectures": ["Phi3ForCausalLM"],
  "attention_dropout": 0.0,
  "auto_map": {"AutoConfig": "configuration_phi3.Phi3Config",
               "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"},
  "bos_token_id": 1, "embd_pdrop": 0.0, "eos_token_id": 32000, "hidden_act": "silu",
  "hidden_size": 3072, "initializer_range": 0.02, "intermediate_size": 8192,
  "max_position_embeddings": 4096, "model_type": "phi3", "num_attention_heads": 32,
  "num_hidden_layers": 32, "num_key_value_heads": 32, "original_max_position_embeddings": 4096,
  "pad_token_id": 32000, "resid_pdrop": 0.0, "rms_norm_eps": 1e-05, "rope_scaling": null,
  "rope_theta": 10000.0, "sliding_window": 2047, "tie_word_embeddings": false,
  "torch_dtype": "bfloat16", "transformers_version": "4.39.3", "use_cache": true,
  "vocab_size": 32064})";

constexpr const char* kGemma2_9B = R"({
  "architectures": ["Gemma2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "attn_logit_softcapping": 50.0, "bos_token_id": 2, "cache_implementation": "hybrid",
  "eos_token_id": 1, "final_logit_softcapping": 30.0, "head_dim": 256,
  "hidden_act": "gelu_pytorch_tanh", "hidden_activation": "gelu_pytorch_tanh",
  "hidden_size": 3584, "initializer_range": 0.02, "intermediate_size": 14336,
  "max_position_embeddings": 8192, "model_type": "gemma2", "num_attention_heads": 16,
  "num_hidden_layers": 42, "num_key_value_heads": 8, "pad_token_id": 0,
  "query_pre_attn_scalar": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
  "sliding_window": 4096, "sliding_window_size": 4096, "torch_dtype": "float32",
  "transformers_version": "4.42.0.dev0", "use_cache": true, "vocab_size": 256000})";

constexpr const char* kMixtral8x7B = R"({
  "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
  "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
  "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
  "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
  "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
  "rms_norm_eps": 1e-05, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.02,
  "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
  "transformers_version": "4.36.0.dev0", "use_cache": true, "vocab_size": 32000})";

constexpr const char* kDeepseekV2Lite = R"({
  "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "aux_loss_alpha": 0.001, "bos_token_id": 100000, "eos_token_id": 100001,
  "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
  "initializer_range": 0.02, "intermediate_size": 10944, "kv_lora_rank": 512,
  "max_position_embeddings": 163840, "model_type": "deepseek_v2", "moe_intermediate_size": 1408,
  "moe_layer_freq": 1, "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2,
  "norm_topk_prob": false, "num_attention_heads": 16, "num_experts_per_tok": 6,
  "num_hidden_layers": 27, "num_key_value_heads": 16, "pretraining_tp": 1, "q_lora_rank": null,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "rms_norm_eps": 1e-06,
  "rope_scaling": {"beta_fast": 32, "beta_slow": 1, "factor": 40, "mscale": 0.707,
                   "mscale_all_dim": 0.707, "original_max_position_embeddings": 4096,
                   "type": "yarn"},
  "rope_theta": 10000, "routed_scaling_factor": 1.0, "scoring_func": "softmax", "seq_aux": true,
  "tie_word_embeddings": false, "topk_group": 1, "topk_method": "greedy",
  "torch_dtype": "bfloat16", "transformers_version": "4.39.3", "use_cache": true,
  "v_head_dim": 128, "vocab_size": 102400})";

// Every architecture field of two configs agrees (names aside).
void expect_same_architecture(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.family, b.family);
  EXPECT_EQ(a.hf_architecture, b.hf_architecture);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_layers, b.num_layers);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.num_kv_heads, b.num_kv_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_DOUBLE_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, b.rope_scaling.type);
  EXPECT_DOUBLE_EQ(a.rope_scaling.factor, b.rope_scaling.factor);
  EXPECT_DOUBLE_EQ(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor);
  EXPECT_DOUBLE_EQ(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor);
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings,
            b.rope_scaling.original_max_position_embeddings);
  EXPECT_DOUBLE_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.hidden_act, b.hidden_act);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_ids, b.eos_token_ids);
  EXPECT_EQ(a.torch_dtype, b.torch_dtype);
  EXPECT_DOUBLE_EQ(a.attn_logit_softcapping, b.attn_logit_softcapping);
  EXPECT_DOUBLE_EQ(a.final_logit_softcapping, b.final_logit_softcapping);
  EXPECT_DOUBLE_EQ(a.query_pre_attn_scalar, b.query_pre_attn_scalar);
  EXPECT_EQ(a.sandwich_norms, b.sandwich_norms);
  EXPECT_EQ(a.scale_embeddings, b.scale_embeddings);
  EXPECT_EQ(a.alternating_sliding_window, b.alternating_sliding_window);
  EXPECT_EQ(a.moe.num_experts, b.moe.num_experts);
  EXPECT_EQ(a.moe.experts_per_token, b.moe.experts_per_token);
  EXPECT_EQ(a.moe.expert_intermediate_size, b.moe.expert_intermediate_size);
  EXPECT_EQ(a.moe.num_shared_experts, b.moe.num_shared_experts);
  EXPECT_EQ(a.moe.first_dense_layers, b.moe.first_dense_layers);
  EXPECT_EQ(a.mla.kv_lora_rank, b.mla.kv_lora_rank);
  EXPECT_EQ(a.mla.q_lora_rank, b.mla.q_lora_rank);
  EXPECT_EQ(a.mla.qk_nope_head_dim, b.mla.qk_nope_head_dim);
  EXPECT_EQ(a.mla.qk_rope_head_dim, b.mla.qk_rope_head_dim);
  EXPECT_EQ(a.mla.v_head_dim, b.mla.v_head_dim);
  EXPECT_EQ(a.moe.scoring_func, b.moe.scoring_func);
  EXPECT_EQ(a.moe.topk_method, b.moe.topk_method);
  EXPECT_EQ(a.moe.norm_topk_prob, b.moe.norm_topk_prob);
  EXPECT_DOUBLE_EQ(a.moe.routed_scaling_factor, b.moe.routed_scaling_factor);
  EXPECT_EQ(a.moe.num_groups, b.moe.num_groups);
  EXPECT_EQ(a.moe.topk_groups, b.moe.topk_groups);
  EXPECT_DOUBLE_EQ(a.rope_scaling.mscale, b.rope_scaling.mscale);
  EXPECT_DOUBLE_EQ(a.rope_scaling.mscale_all_dim, b.rope_scaling.mscale_all_dim);
  EXPECT_DOUBLE_EQ(a.rope_scaling.beta_fast, b.rope_scaling.beta_fast);
  EXPECT_DOUBLE_EQ(a.rope_scaling.beta_slow, b.rope_scaling.beta_slow);
  EXPECT_EQ(a.parameter_count(), b.parameter_count());
}

// The published config.json of each preset parses to exactly that preset.
TEST(HfConfig, PublishedConfigsMatchPresets) {
  const std::pair<const char*, const char*> cases[] = {
      {kLlama3_8B, "llama-3-8b"},
      {kLlama32_1B, "llama-3.2-1b"},
      {kLlama2_7B, "llama-2-7b"},
      {kQwen2_05B, "qwen2-0.5b"},
      {kMistral7B_v03, "mistral-7b"},
      {kPhi3Mini, "phi-3-mini-4k"},
      {kGemma2_9B, "gemma-2-9b"},
      {kMixtral8x7B, "mixtral-8x7b"},
      {kDeepseekV2Lite, "deepseek-v2-lite"},
  };
  for (const auto& [json, preset_name] : cases) {
    SCOPED_TRACE(preset_name);
    const auto parsed = parse_hf_config(json, "/models/x");
    ASSERT_TRUE(parsed.ok()) << parsed.error().message;
    EXPECT_EQ(parsed->name, "/models/x");
    const auto preset = find_preset(preset_name);
    ASSERT_TRUE(preset.ok());
    expect_same_architecture(*parsed, *preset);
  }
}

std::string with(const std::string& json, const std::string& from, const std::string& to) {
  std::string s = json;
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(HfConfig, DefaultsForAbsentOrNullFields) {
  const std::string base = kLlama2_7B;
  // num_key_value_heads absent: equals the head count; head_dim null: hidden / heads.
  auto c =
      parse_hf_config(with(base, R"("num_key_value_heads": 32,)", R"("head_dim": null,)"), "m");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->num_kv_heads, 32);
  EXPECT_EQ(c->head_dim, 128);
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);  // absent rope_theta
  // eos as a list; rope_scaling with the older "type" key.
  c = parse_hf_config(
      with(with(base, R"("eos_token_id": 2)", R"("eos_token_id": [2, 7])"),
           R"("rope_scaling": null)", R"("rope_scaling": {"type": "linear", "factor": 2.0})"),
      "m");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->eos_token_ids, (std::vector<int>{2, 7}));
  EXPECT_EQ(c->rope_scaling.type, "linear");
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 2.0);
  // tie_word_embeddings absent: false for Llama, true for Gemma-2.
  c = parse_hf_config(with(base, R"("tie_word_embeddings": false,)", ""), "m");
  ASSERT_TRUE(c.ok());
  EXPECT_FALSE(c->tie_word_embeddings);
  c = parse_hf_config(kGemma2_9B, "m");
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c->tie_word_embeddings);
  // Qwen2 with use_sliding_window true keeps its window; absent torch_dtype means float32.
  c = parse_hf_config(
      with(with(kQwen2_05B, R"("use_sliding_window": false)", R"("use_sliding_window": true)"),
           R"("torch_dtype": "bfloat16",)", ""),
      "m");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->sliding_window, 131072);
  EXPECT_EQ(c->torch_dtype, DType::kF32);
  // Recent transformers: "dtype" and rope_parameters carrying rope_theta.
  c = parse_hf_config(with(with(base, R"("torch_dtype": "float16")", R"("dtype": "bfloat16")"),
                           R"("rope_scaling": null)",
                           R"("rope_parameters": {"rope_type": "default", "rope_theta": 20000.0})"),
                      "m");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->torch_dtype, DType::kBF16);
  EXPECT_DOUBLE_EQ(c->rope_theta, 20000.0);
  EXPECT_EQ(c->rope_scaling.type, "none");
}

std::string error_of(const std::string& json) {
  const auto c = parse_hf_config(json, "/m");
  return c.ok() ? "" : c.error().message;
}

void expect_error(const std::string& json, const std::string& part) {
  const std::string message = error_of(json);
  EXPECT_NE(message.find(part), std::string::npos) << "message: " << message;
  EXPECT_NE(message.find("/m/config.json"), std::string::npos) << "message: " << message;
}

TEST(HfConfig, BadInputNamesFieldAndFile) {
  const std::string base = kLlama2_7B;
  expect_error("{", "is not valid JSON");
  expect_error("[1]", "is not a JSON object");
  expect_error(with(base, R"("hidden_size": 4096,)", ""), "missing required field \"hidden_size\"");
  expect_error(with(base, R"("hidden_size": 4096)", R"("hidden_size": "4096")"),
               "\"hidden_size\" must be an integer (got string)");
  expect_error(with(base, R"("hidden_size": 4096)", R"("hidden_size": 4096.5)"),
               "\"hidden_size\" must be an integer");
  expect_error(with(base, R"("hidden_size": 4096)", R"("hidden_size": 99999999999)"),
               "\"hidden_size\" is out of range");
  expect_error(with(base, R"("rms_norm_eps": 1e-05)", R"("rms_norm_eps": "small")"),
               "\"rms_norm_eps\" must be a number");
  expect_error(with(base, R"("rope_scaling": null)", R"("rope_scaling": 3)"),
               "\"rope_scaling\" must be an object or null");
  expect_error(with(base, R"("rope_scaling": null)", R"("rope_scaling": {"rope_type": "llama3"})"),
               "needs \"original_max_position_embeddings\"");
  expect_error(with(base, R"("torch_dtype": "float16")", R"("torch_dtype": "int8")"),
               "expected bfloat16, float16 or float32");
  expect_error(with(base, R"("eos_token_id": 2)", R"("eos_token_id": ["x"])"),
               "\"eos_token_id\" must hold integers");
  expect_error(with(base, R"(["LlamaForCausalLM"])", R"(["GPTNeoXForCausalLM"])"),
               "architecture 'GPTNeoXForCausalLM' is not supported");
  expect_error(with(base, R"("architectures": ["LlamaForCausalLM"],)", R"("architectures": 5,)"),
               "\"architectures\" must be a non-empty list of strings");
  expect_error(with(base, R"("num_key_value_heads": 32)", R"("num_key_value_heads": 5)"),
               "not a multiple of num_key_value_heads");
  expect_error(with(base, R"("num_attention_heads": 32)", R"("num_attention_heads": 0)"),
               "\"num_attention_heads\" must be positive");
  expect_error(R"({"vocab_size": 5})", "missing \"architectures\" and \"model_type\"");
  // Absurd sizes are refused before any int64 size arithmetic could overflow.
  expect_error(with(with(base, R"("num_hidden_layers": 32)", R"("num_hidden_layers": 2000000000)"),
                    R"("vocab_size": 32000)", R"("vocab_size": 2000000000)"),
               "more than 10^15 parameters");
  expect_error(with(kMixtral8x7B, R"("num_experts_per_tok": 2)", R"("num_experts_per_tok": 9)"),
               "num_experts_per_tok (9) exceeds the number of experts (8)");
  expect_error(with(kMixtral8x7B, R"("num_experts_per_tok": 2)", R"("num_experts_per_tok": 0)"),
               "needs num_experts_per_tok of at least 1 (got 0)");
  expect_error(with(kDeepseekV2Lite, R"("n_shared_experts": 2)", R"("n_shared_experts": -2)"),
               "n_shared_experts must not be negative");
}

TEST(HfConfig, ArchitectureFromModelTypeWhenListAbsent) {
  const auto c =
      parse_hf_config(with(kMistral7B_v03, R"("architectures": ["MistralForCausalLM"],)", ""), "m");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->family, "mistral");
  EXPECT_EQ(c->hf_architecture, "MistralForCausalLM");
}

TEST(HfConfig, FeaturesTheEngineCannotRunAreNamed) {
  // Silently ignoring either would compute another model.
  const auto partial = parse_hf_config(
      with(kMistral7B_v03, R"("architectures": ["MistralForCausalLM"],)",
           R"("architectures": ["MistralForCausalLM"], "partial_rotary_factor": 0.5,)"),
      "m");
  ASSERT_TRUE(partial.ok()) << partial.error().message;
  EXPECT_NE(partial->check_supported().error().message.find("partial_rotary_factor 0.5"),
            std::string::npos);
  const auto bias =
      parse_hf_config(with(kMistral7B_v03, R"("architectures": ["MistralForCausalLM"],)",
                           R"("architectures": ["MistralForCausalLM"], "mlp_bias": true,)"),
                      "m");
  ASSERT_TRUE(bias.ok()) << bias.error().message;
  EXPECT_NE(bias->check_supported().error().message.find("MLP biases (mlp_bias)"),
            std::string::npos);
  const auto plain = parse_hf_config(
      with(kMistral7B_v03, R"("architectures": ["MistralForCausalLM"],)",
           R"("architectures": ["MistralForCausalLM"], "partial_rotary_factor": 1.0,)"),
      "m");
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  EXPECT_TRUE(plain->check_supported().ok());
}

TEST(HfConfig, LoadsFromDirectory) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ib_hfc_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  ASSERT_TRUE(write_file_atomic(dir / "config.json", kQwen2_05B).ok());
  const auto c = load_hf_config(dir.string());
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->name, dir.string());
  EXPECT_TRUE(c->attention_bias);
  EXPECT_EQ(c->sliding_window, 0);
  fs::remove_all(dir);
  const auto missing = load_hf_config(dir.string());
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("config.json"), std::string::npos);
}

// quantization_config: the FP8 checkpoint formats load, anything else is refused naming it.
TEST(HfConfig, QuantizationConfigOfFp8CheckpointsAndRefusals) {
  const std::string base = kLlama3_8B;
  const auto with_q = [&](const std::string& q) {
    return with(base, R"("use_cache": true,)",
                R"("use_cache": true, "quantization_config": )" + q + ",");
  };
  auto plain = parse_hf_config(base, "m");
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->quantization.quantized());
  EXPECT_EQ(plain->quantization.quant_method, "");

  auto fp8 = parse_hf_config(
      with_q(
          R"({"quant_method": "fp8", "activation_scheme": "dynamic", "ignored_layers": ["lm_head"]})"),
      "m");
  ASSERT_TRUE(fp8.ok()) << fp8.error().message;
  EXPECT_EQ(fp8->quantization.quant_method, "fp8");
  EXPECT_EQ(fp8->quantization.format, "fp8");
  EXPECT_FALSE(fp8->quantization.per_channel_scales);

  auto ct = parse_hf_config(with_q(R"({"quant_method": "compressed-tensors",
      "format": "float-quantized", "ignore": ["lm_head"], "config_groups": {"group_0": {
      "targets": ["Linear"], "weights": {"num_bits": 8, "type": "float", "strategy": "channel",
      "symmetric": true, "dynamic": false}, "input_activations": {"num_bits": 8, "type": "float",
      "strategy": "token", "dynamic": true, "symmetric": true}}}})"),
                            "m");
  ASSERT_TRUE(ct.ok()) << ct.error().message;
  EXPECT_EQ(ct->quantization.format, "fp8");
  EXPECT_TRUE(ct->quantization.per_channel_scales);

  // compressed-tensors INT8 as llm-compressor writes it: W8A8 (dynamic per-token int8
  // activations) and W8A16 (weights only).
  const std::string int8_weights =
      R"("weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric": true,
      "dynamic": false})";
  const auto int8_config = [&](const std::string& format, const std::string& activations) {
    return with_q(R"({"quant_method": "compressed-tensors", "format": ")" + format +
                  R"(", "ignore": ["lm_head"], "config_groups": {"group_0": {"targets":
                  ["Linear"], )" +
                  int8_weights + activations + "}}}");
  };
  auto w8a8 = parse_hf_config(int8_config("int-quantized", R"(, "input_activations":
      {"num_bits": 8, "type": "int", "strategy": "token", "dynamic": true, "symmetric": true})"),
                              "m");
  ASSERT_TRUE(w8a8.ok()) << w8a8.error().message;
  EXPECT_EQ(w8a8->quantization.format, "int8-w8a8");
  EXPECT_TRUE(w8a8->quantization.per_channel_scales);
  EXPECT_FALSE(w8a8->quantization.static_activations);
  // Static per-tensor input scales (llm-compressor's W8A8 static; vLLM's fp8 "static").
  auto w8a8_static = parse_hf_config(int8_config("int-quantized", R"(, "input_activations":
      {"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": false, "symmetric": true})"),
                                     "m");
  ASSERT_TRUE(w8a8_static.ok()) << w8a8_static.error().message;
  EXPECT_EQ(w8a8_static->quantization.format, "int8-w8a8");
  EXPECT_TRUE(w8a8_static->quantization.static_activations);
  auto fp8_static = parse_hf_config(with_q(R"({"quant_method": "fp8", "activation_scheme":
      "static"})"),
                                    "m");
  ASSERT_TRUE(fp8_static.ok()) << fp8_static.error().message;
  EXPECT_EQ(fp8_static->quantization.format, "fp8");
  EXPECT_TRUE(fp8_static->quantization.static_activations);
  auto w8a16 = parse_hf_config(int8_config("naive-quantized", ""), "m");
  ASSERT_TRUE(w8a16.ok()) << w8a16.error().message;
  EXPECT_EQ(w8a16->quantization.format, "int8");

  const auto accepted = [&](const std::string& q) {
    auto c = parse_hf_config(with_q(q), "m");
    EXPECT_TRUE(c.ok()) << q << ": " << c.error().message;
    return c.ok() ? c->quantization : CheckpointQuantization{};
  };
  const auto awq = accepted(R"({"quant_method": "awq", "bits": 4, "group_size": 64, "version":
      "gemm", "zero_point": true})");
  EXPECT_EQ(awq.format, "awq");
  EXPECT_EQ(awq.packing, "awq");
  EXPECT_EQ(awq.group_size, 64);
  EXPECT_TRUE(awq.zero_points);
  const auto gptq = accepted(R"({"quant_method": "gptq", "bits": 4, "group_size": -1, "desc_act":
      true, "sym": true})");
  EXPECT_EQ(gptq.format, "gptq");
  EXPECT_EQ(gptq.group_size, 0);  // one group per row
  EXPECT_TRUE(gptq.act_order);
  EXPECT_FALSE(gptq.zero_points);
  EXPECT_TRUE(gptq.zeros_minus_one);  // checkpoint_format "gptq" (v1) by default
  const auto gptq_v2 = accepted(R"({"quant_method": "gptq", "bits": 4, "group_size": 128, "sym":
      false, "checkpoint_format": "gptq_v2"})");
  EXPECT_TRUE(gptq_v2.zero_points);
  EXPECT_FALSE(gptq_v2.zeros_minus_one);
  const auto nf4 = accepted(R"({"quant_method": "bitsandbytes", "load_in_4bit": true,
      "bnb_4bit_quant_type": "nf4", "bnb_4bit_use_double_quant": true})");
  EXPECT_EQ(nf4.format, "nf4");
  EXPECT_EQ(nf4.group_size, 64);
  const auto w4a16 = accepted(R"({"quant_method": "compressed-tensors", "format":
      "pack-quantized", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int",
      "strategy": "group", "group_size": 128, "symmetric": false}}}})");
  EXPECT_EQ(w4a16.format, "awq");  // zero points: awq's scheme
  EXPECT_EQ(w4a16.packing, "compressed-tensors");
  EXPECT_EQ(w4a16.group_size, 128);

  const auto refused = [&](const std::string& q, const std::string& names) {
    auto c = parse_hf_config(with_q(q), "m");
    ASSERT_FALSE(c.ok()) << q;
    EXPECT_EQ(c.error().kind, ErrorKind::kUser);
    EXPECT_NE(c.error().message.find(names), std::string::npos) << c.error().message;
    EXPECT_NE(c.error().message.find("supported: \"fp8\""), std::string::npos) << c.error().message;
  };
  refused(R"({"quant_method": "awq", "bits": 4, "version": "gemv"})", "\"gemv\"");
  refused(R"({"quant_method": "awq", "bits": 3})", "bits 3");
  refused(R"({"quant_method": "gptq", "bits": 8})", "bits 8");
  refused(R"({"quant_method": "gptq", "bits": 4, "group_size": 100})", "100");
  refused(R"({"quant_method": "gptq", "bits": 4, "checkpoint_format": "marlin"})", "\"marlin\"");
  refused(R"({"quant_method": "bitsandbytes", "load_in_4bit": true, "bnb_4bit_quant_type":
      "fp4"})",
          "\"fp4\"");
  refused(R"({"quant_method": "bitsandbytes", "load_in_8bit": true})", "8-bit");
  refused(R"({"quant_method": "hqq"})", "\"hqq\"");
  refused(R"({"quant_method": "fp8", "activation_scheme": "per-group"})", "\"per-group\"");
  refused(R"({"quant_method": "fp8", "weight_block_size": [128, 128]})", "weight_block_size");
  refused(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights":
      {"num_bits": 4, "type": "int", "strategy": "group"}}}})",
          "4-bit int");  // stored unpacked (no "pack-quantized" format)
  refused(R"({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights":
      {"num_bits": 8, "type": "float", "strategy": "tensor"}, "input_activations":
      {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": false}}}})",
          "static input activations with strategy \"token\"");
  refused(R"({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups":
      {"g": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
      "input_activations": {"num_bits": 8, "type": "int", "strategy": "tensor", "dynamic": false,
      "symmetric": false}}}})",
          "a zero point (asymmetric)");
  // W8A16 int8 as compressed-tensors usually publishes it: packed into int32.
  refused(R"({"quant_method": "compressed-tensors", "format": "pack-quantized", "config_groups":
      {"g": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"}}}})",
          "pack-quantized weights of 8-bit int");
  refused(R"({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups":
      {"g": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel", "symmetric":
      false}}}})",
          "asymmetric");
  refused(R"({"quant_method": "compressed-tensors", "format": "int-quantized", "config_groups":
      {"g": {"weights": {"num_bits": 8, "type": "int", "strategy": "channel"},
      "input_activations": {"num_bits": 8, "type": "float", "dynamic": true}}}})",
          "8-bit float with int weights");
}

// LLaVA's language model is its text_config, a Llama whose absent fields are LlamaConfig's
// defaults (llava-hf's files give only what differs).
TEST(HfConfig, LlavaTextConfigIsALlamaWithLlamaConfigDefaults) {
  auto c = parse_hf_config(R"({"architectures": ["LlavaForConditionalGeneration"],
      "text_config": {"model_type": "llama", "max_position_embeddings": 4096,
                      "rms_norm_eps": 1e-05, "vocab_size": 32064},
      "vision_config": {"hidden_size": 1024}})",
                           "llava");
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->family, "llama");
  EXPECT_EQ(c->hf_architecture, "LlavaForConditionalGeneration");
  EXPECT_EQ(c->hidden_size, 4096);
  EXPECT_EQ(c->intermediate_size, 11008);
  EXPECT_EQ(c->num_layers, 32);
  EXPECT_EQ(c->num_kv_heads, 32);
  EXPECT_EQ(c->vocab_size, 32064);
  EXPECT_EQ(c->max_position_embeddings, 4096);
  for (const auto& [bad, words] : std::vector<std::pair<std::string, std::string>>{
           {R"({"architectures": ["LlavaForConditionalGeneration"]})", "\"text_config\""},
           {R"({"architectures": ["LlavaForConditionalGeneration"],
                "text_config": {"model_type": "mistral"}})",
            "\"mistral\" is not supported"},
           {R"({"architectures": ["LlavaForConditionalGeneration"],
                "text_config": {"hidden_size": "big"}})",
            "text_config"}}) {
    auto refused = parse_hf_config(bad, "x");
    ASSERT_FALSE(refused.ok()) << bad;
    EXPECT_NE(refused.error().message.find(words), std::string::npos) << refused.error().message;
  }
}

}  // namespace
}  // namespace ib
