#include "cli/commands.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cli/plugins.h"
#include "model/presets.h"

namespace ib {
namespace {

std::string row_of(const std::string& table, const std::string& name) {
  const auto pos = table.find("| " + name + " |");
  if (pos == std::string::npos) return "";
  return table.substr(pos, table.find('\n', pos) - pos);
}

TEST(ModelsTable, ListsEveryPresetWithSizesAndSupport) {
  const auto presets = all_presets();
  const std::string table = models_table(presets);
  for (const auto& m : presets) EXPECT_FALSE(row_of(table, m.name).empty()) << m.name;
  EXPECT_EQ(static_cast<size_t>(std::count(table.begin(), table.end(), '\n')), presets.size() + 2);
  // Llama-3-8B: 8.03 B parameters; bf16 = 2 bytes each = 14.96 GiB; KV 128 KiB per token.
  const std::string llama = row_of(table, "llama-3-8b");
  EXPECT_NE(llama.find("| 8.03B |"), std::string::npos) << llama;
  EXPECT_NE(llama.find("| 14.96 |"), std::string::npos) << llama;
  EXPECT_NE(llama.find("| 128 |"), std::string::npos) << llama;
  // fp8 as --quantization fp8 loads it: embed + lm_head bf16 (2 x 128256 x 4096 x 2 B), 32
  // layers of 218.1 M matmul weights at 1 B and 43008 fp32 row scales, bf16 norms = 8.46 GiB.
  EXPECT_NE(table.find("| GiB fp8 / int8 |"), std::string::npos);
  EXPECT_NE(llama.find("| 8.46 |"), std::string::npos) << llama;
  // awq / gptq: the same layers at half a byte, f16 scales and u8 zero points per 128 (5.11 MB a
  // layer): 5.36 GiB; nf4: an f32 absmax per 64 instead (13.6 MB a layer): 5.61 GiB.
  EXPECT_NE(llama.find("| 5.36 | 5.61 |"), std::string::npos) << llama;
  // gguf Q4_K_M (the dummy mix): bf16 embed + lm_head 2.10 GB; 16 layers of q/k/v rows padded to
  // Q6_K v's 3,360 bytes, Q6_K down (144.3 MB a layer) and 16 all in Q4_K (122.7 MB): 5.94 GiB.
  EXPECT_NE(llama.find("| 5.36 | 5.61 | 5.94 |"), std::string::npos) << llama;
  // tiny-15m's hidden size 288 is no multiple of 128, 64 or 256: no 4-bit allocation.
  EXPECT_NE(row_of(table, "tiny-15m").find("| - | - | - |"), std::string::npos);
  EXPECT_NE(llama.find("| yes |"), std::string::npos) << llama;
  // Gemma-2-9B's head_dim 256 and Gemma-2-27B's 128: their soft-capped attention runs on CUDA.
  EXPECT_NE(row_of(table, "gemma-2-9b").find("| yes |"), std::string::npos)
      << row_of(table, "gemma-2-9b");
  EXPECT_NE(row_of(table, "gemma-2-27b").find("| yes |"), std::string::npos)
      << row_of(table, "gemma-2-27b");
  // DeepSeek-V2-Lite runs on the CPU and CUDA (its latent attention has CUDA kernels); its KV
  // cache holds 27 x 576 bf16 values a token (30.38 KiB).
  const std::string deepseek = row_of(table, "deepseek-v2-lite");
  EXPECT_NE(deepseek.find("| 163840 | yes |"), std::string::npos) << deepseek;
  EXPECT_NE(deepseek.find("| 30.375 |"), std::string::npos) << deepseek;
  // Mixtral: bf16 weights 46.70 B parameters at 2 bytes = 86.99 GiB. Its experts quantize too
  // (on the CPU backend): bf16 embed + lm_head (2 x 32000 x 4096 x 2 B) and, per layer, q/k/v
  // (6144 x 4096), o (4096 x 4096) and 8 experts' gate/up (28672 x 4096) and down (4096 x 14336)
  // at 1 B with fp32 row scales, a bf16 router (8 x 4096): 43.77 GiB; the same at half a byte
  // with f16 scales and u8 zeros per 128: 23.13 GiB; with an f32 absmax per 64: 24.82 GiB. No
  // GGUF blocks for experts.
  const std::string mixtral = row_of(table, "mixtral-8x7b");
  EXPECT_NE(mixtral.find("| 46.70B |"), std::string::npos) << mixtral;
  EXPECT_NE(mixtral.find("| 43.77 | 23.13 | 24.82 | - |"), std::string::npos) << mixtral;
  EXPECT_NE(mixtral.find("| yes |"), std::string::npos) << mixtral;
  // Nor DeepSeek-V2-Lite's (its experts run dense too).
  EXPECT_NE(row_of(table, "deepseek-v2-lite").find("| - | - | - | - |"), std::string::npos);
  EXPECT_NE(row_of(table, "tiny-15m").find("M |"), std::string::npos);
}

TEST(Plugins, BuiltinsLoadInDependencyOrder) {
  PluginRegistry r;
  ASSERT_TRUE(register_builtin_plugins(r).ok());
  EXPECT_EQ(r.names_of(PluginKind::kTarget),
            (std::vector<std::string>{"native", "openai", "openai-chat"}));
  EXPECT_EQ(r.names_of(PluginKind::kReportSink),
            (std::vector<std::string>{"jsonl", "json", "csv", "markdown"}));
  EXPECT_EQ(r.names_of(PluginKind::kCollector),
            (std::vector<std::string>{"rss", "engine-pools", "nvml"}));
  EXPECT_EQ(r.names_of(PluginKind::kWorkload),
            (std::vector<std::string>{"random-dataset", "random-mm-dataset", "jsonl-dataset"}));
  auto order = r.load_order();
  ASSERT_TRUE(order.ok());
  auto pos = [&](const std::string& n) { return std::find(order->begin(), order->end(), n); };
  EXPECT_LT(pos("native"), pos("engine-pools"));
  EXPECT_LT(pos("engine-pools"), pos("json"));
  EXPECT_LT(pos("rss"), pos("markdown"));
  auto table = plugins_table(r);
  ASSERT_TRUE(table.ok());
  EXPECT_NE(table->find("| engine-pools | collector |"), std::string::npos) << *table;
  EXPECT_NE(table->find("| native |"), std::string::npos);
  EXPECT_FALSE(register_builtin_plugins(r).ok());  // names are unique
}

TEST(Eval, KlDivergenceOfSoftmaxDistributions) {
  EXPECT_EQ(kl_divergence({1.0f, 2.0f, -3.0f}, {1.0f, 2.0f, -3.0f}), 0.0);
  // p = softmax(0, ln 3) = (1/4, 3/4), q uniform: KL = 1/4 ln(1/2) + 3/4 ln(3/2).
  const double want = 0.25 * std::log(0.5) + 0.75 * std::log(1.5);
  EXPECT_NEAR(kl_divergence({0.0f, static_cast<float>(std::log(3.0))}, {5.0f, 5.0f}), want, 1e-7);
  // Shifting every logit changes no distribution.
  EXPECT_NEAR(kl_divergence({0.0f, 1.0f}, {10.0f, 11.0f}), 0.0, 1e-12);
}

}  // namespace
}  // namespace ib
