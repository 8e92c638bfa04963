#include "model/presets.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <set>

#include "core/fs.h"

namespace ib {
namespace {

// x rounded to `digits` significant digits.
double round_sig(double x, int digits) {
  const double scale = std::pow(10.0, digits - 1 - static_cast<int>(std::floor(std::log10(x))));
  return std::round(x * scale) / scale;
}

ModelConfig preset(const std::string& name) {
  auto c = find_preset(name);
  EXPECT_TRUE(c.ok()) << name << ": " << c.error().message;
  return c.ok() ? *c : ModelConfig{};
}

// Parameter totals as the Hugging Face Hub reports them for each repo (safetensors metadata).
TEST(Presets, ParameterCountsMatchPublishedTotals) {
  const std::pair<const char*, double> published[] = {
      {"llama-2-7b", 6.74e9},      {"llama-2-13b", 13.0e9},      {"llama-3-8b", 8.03e9},
      {"llama-3-70b", 70.6e9},     {"llama-3.2-1b", 1.24e9},     {"qwen2-0.5b", 0.494e9},
      {"qwen2-7b", 7.62e9},        {"qwen2-72b", 72.7e9},        {"mistral-7b", 7.25e9},
      {"mistral-7b-v0.1", 7.24e9}, {"mixtral-8x7b", 46.7e9},     {"mixtral-8x22b", 141e9},
      {"phi-3-mini-4k", 3.82e9},   {"phi-3-medium-4k", 14.0e9},  {"gemma-2-9b", 9.24e9},
      {"gemma-2-27b", 27.2e9},     {"deepseek-v2-lite", 15.7e9}, {"yi-34b", 34.4e9},
      {"deepseek-v2", 236e9},
  };
  for (const auto& [name, total] : published) {
    const auto params = static_cast<double>(preset(name).parameter_count());
    EXPECT_DOUBLE_EQ(round_sig(params, 3), total) << name << ": " << params;
  }
  // llama2.c's stories15M / stories110M.
  EXPECT_DOUBLE_EQ(round_sig(static_cast<double>(preset("tiny-15m").parameter_count()), 2), 15e6);
  EXPECT_DOUBLE_EQ(round_sig(static_cast<double>(preset("tiny-110m").parameter_count()), 2), 110e6);
}

TEST(Presets, ExactCountsAndBytes) {
  const ModelConfig llama3 = preset("llama-3-8b");
  EXPECT_EQ(llama3.parameter_count(), 8030261248);
  EXPECT_EQ(llama3.weight_bytes(DType::kBF16), 2 * 8030261248);
  EXPECT_EQ(llama3.kv_bytes_per_token(DType::kBF16), 131072);  // 2 * 32 layers * 8 * 128 * 2 B
  EXPECT_EQ(preset("llama-2-7b").kv_bytes_per_token(DType::kF16), 524288);  // MHA: 4x Llama-3
  // Tied embeddings are counted once: Llama-3.2-1B = 1,235,814,400 (HF: 1.24B).
  EXPECT_EQ(preset("llama-3.2-1b").parameter_count(), 1235814400);
  // MLA caches the compressed latent and the rope key: 27 * (512 + 64) elements per token.
  EXPECT_EQ(preset("deepseek-v2-lite").kv_bytes_per_token(DType::kBF16), 27 * 576 * 2);
  // MoE decode streams only the routed experts. Mistral publishes 12.9B active parameters for
  // Mixtral 8x7B, counting the whole embedding table where decode reads one row of it.
  const ModelConfig mixtral = preset("mixtral-8x7b");
  const int64_t embedding_rest = int64_t{mixtral.vocab_size - 1} * mixtral.hidden_size;
  EXPECT_DOUBLE_EQ(
      round_sig(static_cast<double>(mixtral.decode_streamed_parameter_count() + embedding_rest), 3),
      12.9e9);
}

TEST(Presets, PublishedFieldsSpotChecks) {
  const ModelConfig l32 = preset("llama-3.2-1b");
  EXPECT_EQ(l32.rope_scaling.type, "llama3");
  EXPECT_DOUBLE_EQ(l32.rope_scaling.factor, 32.0);
  EXPECT_DOUBLE_EQ(l32.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(l32.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(l32.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_TRUE(l32.tie_word_embeddings);
  EXPECT_EQ(l32.head_dim, 64);
  EXPECT_TRUE(preset("qwen2-7b").attention_bias);
  EXPECT_EQ(preset("qwen2-7b").sliding_window, 0);
  const ModelConfig m03 = preset("mistral-7b");
  EXPECT_EQ(m03.vocab_size, 32768);
  EXPECT_DOUBLE_EQ(m03.rope_theta, 1e6);
  EXPECT_EQ(m03.sliding_window, 0);
  EXPECT_EQ(preset("mistral-7b-v0.1").sliding_window, 4096);
  const ModelConfig g27 = preset("gemma-2-27b");
  EXPECT_EQ(g27.head_dim, 128);
  EXPECT_DOUBLE_EQ(g27.query_pre_attn_scalar, 144.0);
  EXPECT_EQ(g27.hidden_act, "gelu_pytorch_tanh");
  EXPECT_EQ(preset("yi-34b").rope_theta, 5e6);
}

TEST(Presets, TableIsConsistent) {
  const auto all = all_presets();
  ASSERT_EQ(all.size(), 21u);
  EXPECT_EQ(all[0].name, "tiny-15m");  // tiny ones first
  EXPECT_EQ(all[1].name, "tiny-110m");
  std::set<std::string> names;
  std::set<std::string> repos;
  for (const auto& c : all) {
    SCOPED_TRACE(c.name);
    EXPECT_TRUE(c.validate().ok()) << c.validate().error().message;
    EXPECT_TRUE(names.insert(c.name).second);
    if (!c.hf_repo_id.empty()) {
      EXPECT_TRUE(repos.insert(c.hf_repo_id).second);
    }
    for (const char ch : c.name) EXPECT_FALSE(ch >= 'A' && ch <= 'Z');
    EXPECT_FALSE(c.eos_token_ids.empty());
    EXPECT_GE(c.bos_token_id, 0);
  }
}

TEST(Presets, LookupIsCaseInsensitiveAndAcceptsHfIds) {
  for (const char* query : {"llama-3-8b", "LLAMA-3-8B", "meta-llama/Meta-Llama-3-8B",
                            "META-LLAMA/META-LLAMA-3-8B", "Meta-Llama-3-8B"}) {
    const auto c = find_preset(query);
    ASSERT_TRUE(c.ok()) << query;
    EXPECT_EQ(c->name, "llama-3-8b");
  }
  EXPECT_EQ(preset("Qwen/Qwen2-0.5B").name, "qwen2-0.5b");
  EXPECT_EQ(preset("mistral-7b-v0.3").name, "mistral-7b");
  EXPECT_EQ(preset("stories15M").name, "tiny-15m");
}

TEST(Presets, UnknownNamesSuggestCloseOnes) {
  const auto a = find_preset("llama3-8b");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().kind, ErrorKind::kUser);
  EXPECT_NE(a.error().message.find("did you mean llama-3-8b"), std::string::npos)
      << a.error().message;
  const auto b = find_preset("qwen2-05b");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("qwen2-0.5b"), std::string::npos) << b.error().message;
  const auto c = find_preset("gpt-j-6b-xl-turbo");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message.find("did you mean"), std::string::npos) << c.error().message;
  EXPECT_NE(c.error().message.find("inferbench models"), std::string::npos);
}

TEST(Presets, UnsupportedFeaturesAreReported) {
  auto features = [](const std::string& name) {
    std::string all;
    for (const auto& f : preset(name).unsupported_features()) all += f + "; ";
    return all;
  };
  for (const char* runnable : {"tiny-15m", "tiny-110m", "llama-2-7b", "llama-3-8b", "llama-3.2-1b",
                               "qwen2-0.5b", "mistral-7b", "phi-3-mini-4k", "yi-34b",
                               "mixtral-8x7b", "mixtral-8x22b", "gemma-2-9b", "gemma-2-27b"}) {
    EXPECT_EQ(features(runnable), "") << runnable;
    EXPECT_TRUE(preset(runnable).check_supported().ok()) << runnable;
  }
  // Gemma-2's features run in its own architecture only: another family with them is refused.
  ModelConfig gemma_like = preset("llama-3-8b");
  gemma_like.attn_logit_softcapping = 50;
  gemma_like.sandwich_norms = true;
  gemma_like.alternating_sliding_window = true;
  gemma_like.hidden_act = "gelu_pytorch_tanh";
  std::string g;
  for (const auto& f : gemma_like.unsupported_features()) g += f + "; ";
  EXPECT_NE(g.find("logit soft-capping"), std::string::npos) << g;
  EXPECT_NE(g.find("post-attention and post-feed-forward norms"), std::string::npos) << g;
  EXPECT_NE(g.find("alternating local/global attention"), std::string::npos) << g;
  EXPECT_NE(g.find("activation 'gelu_pytorch_tanh' (the engine runs 'silu' for llama)"),
            std::string::npos)
      << g;
  // DeepSeek-V2 runs (engine/arch/deepseek2.cpp); a router it does not know is refused by name.
  EXPECT_EQ(features("deepseek-v2-lite"), "");
  ModelConfig other_router = preset("deepseek-v2-lite");
  other_router.moe.scoring_func = "sigmoid";
  other_router.moe.topk_method = "noaux_tc";
  const Status refused = other_router.check_supported();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("scoring_func 'sigmoid'"), std::string::npos);
  EXPECT_NE(refused.error().message.find("topk_method 'noaux_tc'"), std::string::npos);
  EXPECT_NE(refused.error().message.find("inferbench models"), std::string::npos);
  EXPECT_EQ(features("deepseek-v2"), "");  // group_limited_greedy, routed_scaling_factor 16
  EXPECT_EQ(preset("deepseek-v2").moe.topk_method, "group_limited_greedy");
  ModelConfig mixtral_grouped = preset("mixtral-8x7b");
  mixtral_grouped.moe.topk_method = "group_limited_greedy";
  EXPECT_FALSE(mixtral_grouped.check_supported().ok());
}

TEST(Presets, ResolveModelPresetOrDirectory) {
  namespace fs = std::filesystem;
  EXPECT_EQ(resolve_model("tiny-15m")->name, "tiny-15m");

  const fs::path dir = fs::temp_directory_path() / ("ib_resolve_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const auto no_config = resolve_model(dir.string());
  ASSERT_FALSE(no_config.ok());
  EXPECT_NE(no_config.error().message.find("has no config.json"), std::string::npos);

  ASSERT_TRUE(write_file_atomic(dir / "config.json", R"({"architectures": ["LlamaForCausalLM"],
    "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
    "num_attention_heads": 4, "vocab_size": 100, "max_position_embeddings": 256})")
                  .ok());
  for (const fs::path& p : {dir, dir / "config.json"}) {
    const auto c = resolve_model(p.string());
    ASSERT_TRUE(c.ok()) << c.error().message;
    EXPECT_EQ(c->hidden_size, 64);
    EXPECT_EQ(c->num_kv_heads, 4);
  }
  fs::remove_all(dir);

  const auto unknown = resolve_model("lama-3-8b");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.error().kind, ErrorKind::kUser);
  EXPECT_NE(unknown.error().message.find("'lama-3-8b'"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("llama-3-8b"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("no directory with config.json"), std::string::npos);
  EXPECT_NE(unknown.error().message.find("inferbench models"), std::string::npos);
  EXPECT_FALSE(resolve_model("").ok());
}

}  // namespace
}  // namespace ib
