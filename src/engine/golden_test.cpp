// The engine against HF transformers without a GPU: tiny models that tools/make_golden.py saved on
// the GPU machine (testdata/golden/<model>: config.json, model.safetensors, golden.json with HF's
// greedy tokens and fp32 logits over a 1,000-token prompt) are loaded as a user would load them
// and run greedily on the CPU backend in fp32; tokens must equal HF's and every step's logits be
// within a relative L2 error of 1e-4 (the fp32 tolerance of tools/hf_compare.py). DeepSeek-V2
// (deepseek-v2-tiny, made by tools/capture_hf_golden.py) has its own test below.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/cpu/cpu_backend.h"
#include "engine/detail/engine_test_support.h"
#include "engine/engine.h"
#include "model/hf_config.h"

namespace ib {
namespace {

std::string golden_dir(const std::string& model) {
  const char* src = std::getenv("INFERBENCH_SOURCE_DIR");
  return std::string(src ? src : ".") + "/src/engine/testdata/golden/" + model;
}

// The checkpoint in dir loaded as a user would load it, on backend in fp32, capturing logits.
Result<std::unique_ptr<Engine>> load_engine(const std::string& dir, CpuBackend& backend) {
  IB_ASSIGN_OR_RETURN(const ModelConfig config, load_hf_config(dir));
  IB_ASSIGN_OR_RETURN(auto weights,
                      load_weights(config, {LoadFormat::kSafetensors, dir, 0}, backend));
  EngineConfig ec;
  ec.capture_logits = true;
  return create_engine_with_weights(config, std::move(weights), ec, backend);
}

// Relative L2 error of have against want.
double rel_l2(const std::vector<float>& have, const std::vector<double>& want) {
  double err = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    err += (have[i] - want[i]) * (have[i] - want[i]);
    norm += want[i] * want[i];
  }
  return std::sqrt(err / norm);
}

class Golden : public ::testing::TestWithParam<const char*> {};

TEST_P(Golden, CpuEngineMatchesHfTransformers) {
  const std::string dir = golden_dir(GetParam());
  std::ifstream in(dir + "/golden.json");
  ASSERT_TRUE(in) << "missing " << dir << "/golden.json (made by tools/make_golden.py)";
  const nlohmann::json golden = nlohmann::json::parse(in);
  const auto prompt = golden.at("prompt_token_ids").get<std::vector<int32_t>>();
  const auto want_tokens = golden.at("token_ids").get<std::vector<int32_t>>();
  const auto want_logits = golden.at("logits").get<std::vector<std::vector<double>>>();
  ASSERT_EQ(prompt.size(), 1000u);

  CpuBackend backend(2);
  auto engine = load_engine(dir, backend);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  ASSERT_TRUE(
      (*engine)
          ->add_request(testing::greedy_request(1, prompt, static_cast<int>(want_tokens.size())))
          .ok());
  const auto done = testing::run_to_completion(**engine);
  const testing::Completion& got = done.at(1);
  EXPECT_EQ(got.tokens, want_tokens);
  ASSERT_EQ(got.logits.size(), want_logits.size());
  for (size_t step = 0; step < want_logits.size(); ++step) {
    const auto& want = want_logits[step];
    const auto& have = got.logits[step];
    ASSERT_EQ(have.size(), want.size());
    EXPECT_LE(rel_l2(have, want), 1e-4) << GetParam() << " step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(HfTransformers, Golden,
                         ::testing::Values("llama3-tied", "qwen2-bias", "phi3-window"));

// DeepSeek-V2 (deepseek-v2-tiny: multi-head latent attention with q LoRA, YaRN with mscale and
// mscale_all_dim, a dense layer then a MoE layer with group-limited routing, shared experts and
// routed_scaling_factor 2, the published per-expert layout). tools/capture_hf_golden.py (variant
// moe2) made it on the GPU machine with transformers 5.17.0: golden.json keeps HF's fp32 logits at
// the last positions of a 24-token prompt; each is the first step's logits of the prompt up to it.
TEST(GoldenDeepseekV2, CpuEngineMatchesHfTransformers) {
  const std::string dir = golden_dir("deepseek-v2-tiny");
  std::ifstream in(dir + "/golden.json");
  ASSERT_TRUE(in) << "missing " << dir << "/golden.json (made by tools/capture_hf_golden.py)";
  const nlohmann::json golden = nlohmann::json::parse(in);
  const auto prompt = golden.at("prompt_token_ids").get<std::vector<int32_t>>();
  const auto positions = golden.at("positions").get<std::vector<size_t>>();
  const auto want_logits = golden.at("logits").get<std::vector<std::vector<double>>>();
  ASSERT_EQ(positions.size(), want_logits.size());
  ASSERT_FALSE(positions.empty());

  CpuBackend backend(2);
  auto engine = load_engine(dir, backend);
  ASSERT_TRUE(engine.ok()) << engine.error().message;
  for (size_t k = 0; k < positions.size(); ++k) {
    ASSERT_LT(positions[k], prompt.size());
    const std::vector<int32_t> prefix(
        prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(positions[k] + 1));
    ASSERT_TRUE((*engine)->add_request(testing::greedy_request(k + 1, prefix, 1)).ok());
  }
  const auto done = testing::run_to_completion(**engine);
  for (size_t k = 0; k < positions.size(); ++k) {
    const testing::Completion& got = done.at(k + 1);
    ASSERT_EQ(got.logits.size(), 1u);
    const auto& want = want_logits[k];
    const auto& have = got.logits[0];
    ASSERT_EQ(have.size(), want.size());
    EXPECT_LE(rel_l2(have, want), 1e-4) << "position " << positions[k];
  }
}

}  // namespace
}  // namespace ib
