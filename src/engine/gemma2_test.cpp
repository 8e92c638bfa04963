// Gemma-2 on the CPU engine: a tiny random checkpoint under HF's names (input_layernorm,
// post_attention_layernorm, pre_feedforward_layernorm, post_feedforward_layernorm; tied
// embeddings) loads and generates, its logits within 1e-5 of the double-precision reference
// (scaled embeddings, (1 + w) gains, sandwich norms, GeGLU, query_pre_attn_scalar, soft-capped
// attention scores and logits, even layers local and odd layers global), with prompts longer
// than the window; config.json's layer_types other than the alternating pattern are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>

#include "engine/arch/architecture.h"
#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_test_support.h"
#include "model/hf_config.h"
#include "model/presets.h"
#include "model/safetensors.h"

namespace ib {
namespace {

using testing::TempDir;

ModelConfig tiny_gemma2() {
  return testing::tiny_gemma2_config();
}

// Random weights with every norm (stored w of a (1 + w) gain) random around 0, and embeddings
// (tied to the lm_head) scaled by hidden^-0.5 as Gemma's are trained to be: the residual starts
// at unit scale and the logits reach the cap without saturating it.
ModelWeights random_gemma_weights(const ModelConfig& c, Backend& backend, uint64_t seed) {
  ModelWeights w = testing::random_weights(c, backend, seed);
  Rng rng(seed + 5);
  auto randomize = [&](Tensor t) {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    for (float& x : v) x = static_cast<float>(rng.uniform()) - 0.5f;
    backend.copy_from_host(t, v.data(), DType::kF32);
  };
  backend.affine(w.embed, static_cast<float>(1.0 / std::sqrt(c.hidden_size)), 0.0f);
  randomize(w.final_norm);
  for (LayerWeights& l : w.layers) {
    for (Tensor* t : {&l.attn_norm, &l.post_attn_norm, &l.ffn_norm, &l.post_ffn_norm}) {
      randomize(*t);
    }
  }
  return w;
}

// HF-named fp32 tensors of host weights, as Gemma2ForCausalLM saves them (tied: no lm_head).
std::vector<SafetensorsWriteTensor> gemma_tensors(const ModelConfig& c,
                                                  const testing::HostWeights& w) {
  std::vector<SafetensorsWriteTensor> out;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, const std::vector<float>& v) {
    out.push_back({name, DType::kF32, std::move(shape),
                   std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4)});
  };
  const int64_t d = c.hidden_size, q = int64_t{c.num_heads} * c.head_dim;
  const int64_t kv = int64_t{c.num_kv_heads} * c.head_dim, f = c.intermediate_size;
  add("model.embed_tokens.weight", {c.vocab_size, d}, w.embed);
  add("model.norm.weight", {d}, w.final_norm);
  for (size_t i = 0; i < w.layers.size(); ++i) {
    const auto& l = w.layers[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    add(p + "input_layernorm.weight", {d}, l.attn_norm);
    add(p + "post_attention_layernorm.weight", {d}, l.post_attn_norm);
    add(p + "pre_feedforward_layernorm.weight", {d}, l.ffn_norm);
    add(p + "post_feedforward_layernorm.weight", {d}, l.post_ffn_norm);
    add(p + "self_attn.q_proj.weight", {q, d}, l.q);
    add(p + "self_attn.k_proj.weight", {kv, d}, l.k);
    add(p + "self_attn.v_proj.weight", {kv, d}, l.v);
    add(p + "self_attn.o_proj.weight", {d, q}, l.o);
    add(p + "mlp.gate_proj.weight", {f, d}, l.gate);
    add(p + "mlp.up_proj.weight", {f, d}, l.up);
    add(p + "mlp.down_proj.weight", {d, f}, l.down);
  }
  return out;
}

// Greedy generation of prompts up to three windows long; every sampled row against the reference.
void expect_matches_reference(const ModelConfig& c, ModelWeights w, Backend& backend,
                              const testing::HostWeights& host) {
  auto engine = testing::logits_engine(c, std::move(w), "none", backend);
  Rng rng(3);
  std::map<uint64_t, std::vector<int32_t>> prompts;
  for (uint64_t i = 0; i < 4; ++i) {
    prompts[i] = testing::random_prompt(rng, 1 + 6 * static_cast<int>(i), c.vocab_size);
    ASSERT_TRUE(engine->add_request(testing::greedy_request(i, prompts[i], 5)).ok());
  }
  for (const auto& [id, done] : testing::run_to_completion(*engine)) {
    std::vector<int32_t> all = prompts[id];
    all.insert(all.end(), done.tokens.begin(), done.tokens.end());
    const auto ref = testing::reference_logits(c, host, all);
    for (size_t i = 0; i < done.tokens.size(); ++i) {
      const auto& r = ref[prompts[id].size() - 1 + i];
      for (size_t v = 0; v < r.size(); ++v) {
        ASSERT_NEAR(done.logits[i][v], r[v], 1e-5 * c.final_logit_softcapping)
            << "request " << id << " row " << i;
        ASSERT_LT(std::fabs(done.logits[i][v]), c.final_logit_softcapping);  // capped, not clipped
      }
    }
  }
}

TEST(Gemma2Schema, FillsEachLogicalWeightOnceUnderHfNames) {
  const ModelConfig c = tiny_gemma2();
  auto arch = find_architecture(c);
  ASSERT_TRUE(arch.ok()) << arch.error().message;
  EXPECT_EQ((*arch)->name(), "gemma2");
  EXPECT_FALSE((*arch)->runs_fused_decode());
  const WeightSchema s = (*arch)->weight_schema(c);
  EXPECT_EQ(s.architecture, "Gemma2ForCausalLM");
  // embed and final norm (tied: no lm_head); per layer 4 norms, qkv, o, gate_up, down.
  EXPECT_EQ(s.entries.size(), 2u + 3u * 8u);
  EXPECT_TRUE(s.ignores("lm_head.weight"));
  EXPECT_NE(s.expected_names().find("post_feedforward_layernorm.weight"), std::string::npos);
  const AttentionShape shape = attention_shape(c);
  EXPECT_FLOAT_EQ(shape.scale, static_cast<float>(1.0 / std::sqrt(24.0)));
  EXPECT_FLOAT_EQ(shape.logit_softcap, 2.0f);
  EXPECT_EQ(shape.sliding_window, 6);
}

TEST(Gemma2Engine, RandomWeightsMatchTheReference) {
  const ModelConfig c = tiny_gemma2();
  CpuBackend backend(2);
  ModelWeights w = random_gemma_weights(c, backend, 11);
  const testing::HostWeights host = testing::copy_weights_to_host(c, w, backend);
  expect_matches_reference(c, std::move(w), backend, host);
}

TEST(Gemma2Checkpoint, LoadsHfNamesAndMatchesTheReference) {
  const ModelConfig c = tiny_gemma2();
  CpuBackend backend(2);
  ModelWeights random = random_gemma_weights(c, backend, 21);
  const testing::HostWeights host = testing::copy_weights_to_host(c, random, backend);
  TempDir dir;
  ASSERT_TRUE(
      write_safetensors((dir.path() / "model.safetensors").string(), gemma_tensors(c, host)).ok());
  auto loaded = load_weights(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, backend);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  expect_matches_reference(c, std::move(loaded).value(), backend, host);
}

TEST(Gemma2Config, PresetsRunAndLayerTypesAreChecked) {
  for (const char* name : {"gemma-2-9b", "gemma-2-27b"}) {
    auto c = find_preset(name);
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE(c->check_supported().ok()) << name;
    EXPECT_TRUE(c->alternating_sliding_window && c->sandwich_norms) << name;
  }
  TempDir dir;
  auto write_config = [&](const std::string& layer_types) {
    std::ofstream(dir.path() / "config.json")
        << R"({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
  "vocab_size": 101, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 3,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "max_position_embeddings": 256, "sliding_window": 6, "query_pre_attn_scalar": 24,
  "attn_logit_softcapping": 50.0, "final_logit_softcapping": 30.0,
  "hidden_activation": "gelu_pytorch_tanh", "layer_types": )"
        << layer_types << "}";
  };
  write_config(R"(["sliding_attention", "full_attention", "sliding_attention"])");
  auto ok = load_hf_config(dir.path().string());
  ASSERT_TRUE(ok.ok()) << ok.error().message;
  EXPECT_TRUE(ok->check_supported().ok());
  EXPECT_EQ(ok->sliding_window, 6);
  write_config(R"(["full_attention", "sliding_attention", "full_attention"])");
  auto bad = load_hf_config(dir.path().string());
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().kind, ErrorKind::kUser);
  EXPECT_NE(bad.error().message.find("layer_types"), std::string::npos) << bad.error().message;
}

}  // namespace
}  // namespace ib
