// The architecture seam: every family's schema tiles each logical weight exactly once; Phi-3's
// fused checkpoint (as transformers saves it) loads and matches the independent reference; a
// checkpoint of another layout or size is refused naming the architecture, the missing and the
// unexpected tensors and what the schema expects; unknown families are refused before allocation.
#include "engine/arch/architecture.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_test_support.h"

namespace ib {
namespace {

using testing::CheckpointLayout;
using testing::hf_tensors;
using testing::TempDir;
using testing::tiny_config;

ModelConfig family_config(const std::string& family, bool bias, bool tied) {
  ModelConfig c = tiny_config();
  c.family = family;
  c.attention_bias = bias;
  c.tie_word_embeddings = tied;
  return c;
}

TEST(Architecture, EverySchemaFillsEachLogicalWeightExactlyOnce) {
  for (const char* family : {"llama", "mistral", "qwen2", "phi3"}) {
    for (bool bias : {false, true}) {
      if (bias && std::string(family) == "phi3") continue;  // Phi-3 has no q/k/v bias
      for (bool tied : {false, true}) {
        SCOPED_TRACE(std::string(family) + (bias ? " bias" : "") + (tied ? " tied" : ""));
        const ModelConfig c = family_config(family, bias, tied);
        auto arch = find_architecture(c);
        ASSERT_TRUE(arch.ok()) << arch.error().message;
        EXPECT_EQ((*arch)->name(), family);
        CpuBackend backend(1);
        auto w = load_weights(c, {LoadFormat::kDummy, "", 0}, backend);
        ASSERT_TRUE(w.ok()) << w.error().message;
        const WeightSchema schema = (*arch)->weight_schema(c);
        // Per (role, layer): the sources' row ranges, which must tile the weight's rows.
        std::map<std::pair<WeightRole, int>, std::vector<std::pair<int64_t, int64_t>>> rows;
        for (const SchemaEntry& e : schema.entries) {
          for (const TensorSource& s : e.sources) {
            rows[{e.role, e.layer}].emplace_back(s.row_offset, s.shape[0]);
            const Tensor t = weight_for(*w, e.role, e.layer);
            const int64_t row_elems = t.rank == 1 ? 1 : t.numel() / t.shape[0];
            int64_t numel = 1;
            for (int64_t n : s.shape) numel *= n;
            EXPECT_EQ(numel, s.shape[0] * row_elems) << s.name;
          }
        }
        const size_t per_layer = 6 + (bias ? 1 : 0);
        EXPECT_EQ(rows.size(), 2 + (tied ? 0 : 1) + per_layer * 2);
        for (auto& [key, ranges] : rows) {
          std::sort(ranges.begin(), ranges.end());
          int64_t at = 0;
          for (const auto& [offset, count] : ranges) {
            EXPECT_EQ(offset, at) << weight_role_name(key.first) << " layer " << key.second;
            at = offset + count;
          }
          const Tensor t = weight_for(*w, key.first, key.second);
          EXPECT_EQ(at, t.shape[0]) << weight_role_name(key.first) << " layer " << key.second;
        }
      }
    }
  }
}

// transformers' Phi3ForCausalLM layout: the engine reads it into the same weights, and the
// engine's logits match the double-precision reference written from the unfused weights.
TEST(Architecture, Phi3FusedCheckpointMatchesTheReference) {
  const ModelConfig c = family_config("phi3", false, false);
  CpuBackend backend(2);
  ModelWeights dummy = testing::random_weights(c, backend, 5);
  const testing::HostWeights hw = testing::copy_weights_to_host(c, dummy, backend);
  TempDir dir;
  ASSERT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(),
                                hf_tensors(c, hw, DType::kF32, CheckpointLayout::kPhi3Fused))
                  .ok());
  auto loaded = load_weights(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, backend);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(testing::host(backend, loaded->layers[1].wqkv.data),
            testing::host(backend, dummy.layers[1].wqkv.data));
  EXPECT_EQ(testing::host(backend, loaded->layers[0].w_gate_up.data),
            testing::host(backend, dummy.layers[0].w_gate_up.data));

  EngineConfig config;
  config.block_size = 4;
  config.capture_logits = true;
  auto engine = create_engine_with_weights(c, std::move(loaded).value(), config, backend);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  const std::vector<int32_t> prompt = {5, 17, 99, 3, 42, 8, 61};
  ASSERT_TRUE((*engine)->add_request(testing::greedy_request(1, prompt, 5)).ok());
  auto done = testing::run_to_completion(**engine);
  const testing::Completion& out = done.at(1);
  ASSERT_EQ(out.tokens.size(), 5u);
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), out.tokens.begin(), out.tokens.end() - 1);
  const auto ref = testing::reference_logits(c, hw, all);
  for (size_t step = 0; step < out.tokens.size(); ++step) {
    const auto& want = ref[prompt.size() - 1 + step];
    const auto& got = out.logits[step];
    double err = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      err += (got[i] - want[i]) * (got[i] - want[i]);
      norm += want[i] * want[i];
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "step " << step;
  }
}

std::string load_error(const ModelConfig& c, const std::vector<SafetensorsWriteTensor>& tensors) {
  TempDir dir;
  EXPECT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(), tensors).ok());
  CpuBackend backend(1);
  auto w = load_weights(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, backend);
  EXPECT_FALSE(w.ok());
  return w.ok() ? std::string() : w.error().message;
}

testing::HostWeights host_weights(const ModelConfig& c) {
  CpuBackend backend(1);
  ModelWeights w = testing::random_weights(c, backend, 2);
  return testing::copy_weights_to_host(c, w, backend);
}

TEST(Architecture, AnotherFamilysLayoutIsRefusedNamingWhatDiffers) {
  const ModelConfig phi3 = family_config("phi3", false, false);
  const std::string m = load_error(phi3, hf_tensors(phi3, host_weights(phi3), DType::kF32));
  for (const char* part :
       {"Phi3ForCausalLM checkpoint for model 'tiny-test' (family phi3, 2 layers)",
        "tensors 'model.layers.0.self_attn.qkv_proj.weight', ", "are missing",
        "unexpected tensors 'model.layers.0.mlp.gate_proj.weight'",
        "the schema expects model.embed_tokens.weight, model.norm.weight, lm_head.weight and in "
        "each model.layers.N: input_layernorm.weight, post_attention_layernorm.weight, "
        "self_attn.qkv_proj.weight, self_attn.o_proj.weight, mlp.gate_up_proj.weight, "
        "mlp.down_proj.weight",
        "config.json"}) {
    EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in: " << m;
  }
  const ModelConfig llama = family_config("llama", false, false);
  const std::string l = load_error(
      llama, hf_tensors(llama, host_weights(llama), DType::kF32, CheckpointLayout::kPhi3Fused));
  EXPECT_NE(l.find("LlamaForCausalLM checkpoint"), std::string::npos) << l;
  EXPECT_NE(l.find("unexpected tensors 'model.layers.0.mlp.gate_up_proj.weight'"),
            std::string::npos)
      << l;
}

TEST(Architecture, ExtraLayersAreUnexpectedAndTiedLmHeadIsIgnored) {
  ModelConfig three = family_config("llama", false, false);
  three.num_layers = 3;
  const ModelConfig two = family_config("llama", false, false);
  const std::string m = load_error(two, hf_tensors(three, host_weights(three), DType::kF32));
  EXPECT_NE(m.find("unexpected tensors 'model.layers.2."), std::string::npos) << m;
  EXPECT_EQ(m.find("missing"), std::string::npos) << m;

  // A tied model's file may carry lm_head.weight (some exports do): transformers ties it anyway.
  const ModelConfig tied = family_config("llama", false, true);
  auto tensors = hf_tensors(two, host_weights(two), DType::kF32);  // with lm_head.weight
  TempDir dir;
  ASSERT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(), tensors).ok());
  CpuBackend backend(1);
  auto w = load_weights(tied, {LoadFormat::kSafetensors, dir.path().string(), 0}, backend);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(w->lm_head.data.data, w->embed.data);
}

TEST(Architecture, UnknownFamilyIsRefusedBeforeAllocation) {
  ModelConfig c = family_config("falcon", false, false);
  c.hf_architecture = "FalconForCausalLM";
  CpuBackend backend(1);
  auto w = load_weights(c, {LoadFormat::kDummy, "", 0}, backend);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("no architecture for family 'falcon' (FalconForCausalLM); it "
                                   "runs llama, mistral, qwen2, phi3"),
            std::string::npos)
      << w.error().message;
  EXPECT_EQ(backend.memory().snapshot().allocated_bytes, 0);
}

}  // namespace
}  // namespace ib
