// Weights: dummy values and scales, the up-front memory check, safetensors loading (same logits
// as the same weights loaded as dummy, bf16 conversion, missing/mismatched tensors named), and
// rope_inv_freq against double-precision formulas.
#include "engine/model_weights.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>

#include "engine/detail/checkpoint_test_support.h"
#include "engine/detail/engine_test_support.h"
#include "model/safetensors.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using testing::tiny_config;

using testing::host;
using testing::TempDir;

TEST(DummyWeights, FollowTheDocumentedStreamsAndScales) {
  ModelConfig c = tiny_config();
  c.attention_bias = true;
  CpuBackend backend(2);
  WeightOptions opts{LoadFormat::kDummy, "", 42};
  auto w = load_weights(c, opts, backend);
  ASSERT_TRUE(w.ok()) << w.error().message;
  EXPECT_EQ(w->description, "dummy (seed 42)");
  EXPECT_EQ(w->bytes,
            backend.memory().snapshot().bytes_by_tag[static_cast<size_t>(MemoryTag::kWeights)]);
  auto expect_stream = [&](const Tensor& t, uint64_t stream, double scale) {
    const auto v = host(backend, t);
    for (size_t i = 0; i < v.size(); ++i) {
      const float u = counter_uniform(42, stream, i);
      ASSERT_EQ(v[i], static_cast<float>(scale) * (2.0f * u - 1.0f))
          << "stream " << stream << " index " << i;
    }
  };
  const int64_t q = 64, kv = 32, f = 128;
  expect_stream(w->embed, kDummyEmbedStream, 1.0);
  expect_stream(w->lm_head.data, kDummyLmHeadStream, std::sqrt(3.0 / 64));
  const LayerWeights& l1 = w->layers[1];
  expect_stream(l1.wqkv.data.slice_rows(q, kv), dummy_weight_stream(1, DummyTensor::kK),
                std::sqrt(3.0 / 64));
  expect_stream(l1.wo.data, dummy_weight_stream(1, DummyTensor::kO), std::sqrt(3.0 / 64));
  expect_stream(l1.w_gate_up.data.slice_rows(f, f), dummy_weight_stream(1, DummyTensor::kUp),
                std::sqrt(3.0 / 64));
  expect_stream(l1.w_down.data, dummy_weight_stream(1, DummyTensor::kDown), std::sqrt(3.0 / 128));
  expect_stream(l1.bqkv.reshaped({q + 2 * kv, 1}).slice_rows(q + kv, kv),
                dummy_weight_stream(1, DummyTensor::kVBias), 0.1);
  EXPECT_EQ(host(backend, l1.ffn_norm), std::vector<float>(64, 1.0f));
  EXPECT_EQ(host(backend, w->final_norm), std::vector<float>(64, 1.0f));

  c.tie_word_embeddings = true;
  c.attention_bias = false;
  auto tied = load_weights(c, opts, backend);
  ASSERT_TRUE(tied.ok());
  EXPECT_EQ(tied->lm_head.data.data, tied->embed.data);
  EXPECT_TRUE(tied->layers[0].bqkv.empty());
  // Untied with biases holds the lm_head (101 x 64 fp32) and 2 layers of qkv biases (128 fp32)
  // more.
  EXPECT_EQ(w->bytes - tied->bytes, 101 * 64 * 4 + 2 * 128 * 4);
}

TEST(DummyWeights, RefusedBeforeAllocatingWhenOverTheMemoryLimit) {
  CpuBackend backend(1);
  backend.memory().set_limit_bytes(100000);
  auto w = load_weights(tiny_config(), {LoadFormat::kDummy, "", 0}, backend);
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().kind, ErrorKind::kUser);
  EXPECT_NE(w.error().message.find("model 'tiny-test' needs"), std::string::npos)
      << w.error().message;
  EXPECT_NE(w.error().message.find("memory limit"), std::string::npos) << w.error().message;
  EXPECT_EQ(backend.memory().snapshot().num_allocs, 0);
}

TEST(DummyWeights, UnsupportedArchitecturesAreRefused) {
  ModelConfig c = tiny_config();
  c.moe.num_experts = 8;
  c.moe.experts_per_token = 2;
  CpuBackend backend(1);
  auto w = load_weights(c, {}, backend);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("mixture-of-experts"), std::string::npos);
}

using testing::hf_tensors;

// Greedy run of fixed prompts; returns every sampled row's logits.
std::vector<std::vector<float>> engine_logits(const ModelConfig& c, ModelWeights w,
                                              Backend& backend) {
  EngineConfig config;
  config.block_size = 4;
  config.capture_logits = true;
  auto engine = create_engine_with_weights(c, std::move(w), config, backend);
  IB_ASSERT(engine.ok(), "create_engine_with_weights failed");
  EXPECT_TRUE((*engine)->add_request(testing::greedy_request(1, {5, 17, 99, 3, 42, 8}, 4)).ok());
  EXPECT_TRUE((*engine)->add_request(testing::greedy_request(2, {61, 2}, 4)).ok());
  std::vector<std::vector<float>> rows;
  for (auto& [id, done] : testing::run_to_completion(**engine)) {
    rows.insert(rows.end(), done.logits.begin(), done.logits.end());
  }
  return rows;
}

TEST(SafetensorsWeights, SameLogitsAsTheSameWeightsLoadedAsDummy) {
  for (bool bias_and_untied : {false, true}) {
    ModelConfig c = tiny_config();
    c.attention_bias = bias_and_untied;
    c.tie_word_embeddings = !bias_and_untied;
    CpuBackend backend(2);
    ModelWeights dummy = testing::random_weights(c, backend, 9);
    const testing::HostWeights host_w = testing::copy_weights_to_host(c, dummy, backend);
    TempDir dir;
    ASSERT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(),
                                  hf_tensors(c, host_w, DType::kF32))
                    .ok());

    auto loaded = load_weights(c, {LoadFormat::kAuto, dir.path().string(), 0}, backend);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(loaded->description, "safetensors: " + dir.path().string() + " (1 file)");
    EXPECT_EQ(host(backend, loaded->layers[1].wqkv.data), host(backend, dummy.layers[1].wqkv.data));
    EXPECT_EQ(host(backend, loaded->layers[0].w_gate_up.data),
              host(backend, dummy.layers[0].w_gate_up.data));
    const auto from_file = engine_logits(c, std::move(loaded).value(), backend);
    const auto from_dummy = engine_logits(c, std::move(dummy), backend);
    ASSERT_EQ(from_file.size(), 8u);
    EXPECT_EQ(from_file, from_dummy);  // bit for bit: the same fp32 weights
  }
}

TEST(SafetensorsWeights, Bf16IsConvertedToTheBackendDtype) {
  ModelConfig c = tiny_config();
  CpuBackend backend(2);
  ModelWeights dummy = testing::random_weights(c, backend, 3);
  const testing::HostWeights host_w = testing::copy_weights_to_host(c, dummy, backend);
  TempDir dir;
  ASSERT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(),
                                hf_tensors(c, host_w, DType::kBF16))
                  .ok());
  auto loaded = load_weights(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, backend);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  const auto got = host(backend, loaded->layers[1].w_down.data);
  const auto& want = host_w.layers[1].down;
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], round_to_bf16(want[i]));
}

TEST(SafetensorsWeights, MissingAndMismatchedTensorsAreNamed) {
  ModelConfig c = tiny_config();
  CpuBackend backend(2);
  ModelWeights dummy = testing::random_weights(c, backend, 4);
  const testing::HostWeights host_w = testing::copy_weights_to_host(c, dummy, backend);
  auto tensors = hf_tensors(c, host_w, DType::kF32);
  auto error_for = [&](const std::vector<SafetensorsWriteTensor>& ts) {
    TempDir dir;
    EXPECT_TRUE(write_safetensors((dir.path() / "model.safetensors").string(), ts).ok());
    auto w = load_weights(c, {LoadFormat::kSafetensors, dir.path().string(), 0}, backend);
    EXPECT_FALSE(w.ok());
    return w.ok() ? std::string() : w.error().message;
  };
  auto missing = tensors;
  std::erase_if(missing,
                [](const auto& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  const std::string m = error_for(missing);
  EXPECT_NE(m.find("tensor 'model.layers.1.mlp.up_proj.weight' is missing"), std::string::npos)
      << m;

  auto mismatched = tensors;
  for (auto& t : mismatched) {
    if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {64, 32};  // transposed
  }
  const std::string s = error_for(mismatched);
  EXPECT_NE(s.find("'model.layers.0.self_attn.k_proj.weight' has shape [64, 32] but model "
                   "'tiny-test' (LlamaForCausalLM) expects [32, 64]"),
            std::string::npos)
      << s;

  TempDir empty;
  auto none = load_weights(c, {LoadFormat::kSafetensors, empty.path().string(), 0}, backend);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.error().message.find("no safetensors weights"), std::string::npos);
}

// 1 / theta^(2i / d) in double, then the scaling HF applies, for comparison with the fp32 result.
std::vector<double> inv_freq_double(const ModelConfig& c) {
  std::vector<double> f;
  for (int i = 0; i < c.head_dim; i += 2)
    f.push_back(std::pow(c.rope_theta, -static_cast<double>(i) / c.head_dim));
  return f;
}

TEST(RopeInvFreq, DefaultMatchesTheFormula) {
  ModelConfig c = tiny_config();
  c.head_dim = 128;
  c.rope_theta = 500000;
  const auto got = rope_inv_freq(c);
  const auto want = inv_freq_double(c);
  ASSERT_EQ(got.size(), 64u);
  EXPECT_EQ(got[0], 1.0f);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 4e-7 * want[i]) << i;
}

TEST(RopeInvFreq, Llama3ScalingKeepsHighDividesLowAndSmoothsTheMiddle) {
  // Llama-3.2-1B: head_dim 64, theta 500000, factor 32, low 1, high 4, original context 8192.
  ModelConfig c = tiny_config();
  c.head_dim = 64;
  c.rope_theta = 500000;
  c.rope_scaling = {"llama3", 32.0, 1.0, 4.0, 8192};
  const auto got = rope_inv_freq(c);
  const auto base = inv_freq_double(c);
  int high = 0, low = 0, medium = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double wavelen = 2 * std::numbers::pi / base[i];
    double want = base[i];
    if (wavelen < 8192.0 / 4) {
      ++high;
    } else if (wavelen > 8192.0 / 1) {
      want = base[i] / 32;
      ++low;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - smooth) * base[i] / 32 + smooth * base[i];
      ++medium;
    }
    EXPECT_NEAR(got[i], want, 2e-6 * want) << i;
  }
  EXPECT_GT(high, 0);
  EXPECT_GT(low, 0);
  EXPECT_GT(medium, 0);
}

TEST(RopeInvFreq, LinearScalingDividesEveryFrequency) {
  ModelConfig c = tiny_config();
  const auto plain = rope_inv_freq(c);
  c.rope_scaling = {"linear", 4.0, 1.0, 4.0, 0};
  const auto scaled = rope_inv_freq(c);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_EQ(scaled[i], plain[i] / 4.0f);
}

}  // namespace
}  // namespace ib
