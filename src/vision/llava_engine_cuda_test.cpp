// LLaVA through the engine on the CUDA backend against the same engine on the CPU backend (the
// oracle): a tiny LlavaForConditionalGeneration checkpoint (llava_checkpoint_test_support) whose
// language model has one head of 64 (a head size the CUDA attention takes), loaded as the CLI
// loads it; two requests with one and two images, prefill in chunks of 8 tokens (chunks cover
// parts of images). The images go through the vision tower on the CUDA vision ops, their
// embeddings into the prompt, the Llama on the CUDA ops. Stated tolerance on the first generated
// token's logits, relative L2 against the CPU's: fp32 1e-4, fp16 1e-2, bf16 3e-2; and the images
// must matter: the CPU's logits of the same prompt with other pixels differ by more than 1e-3.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "vision/llava_checkpoint_test_support.h"
#include "vision/llava_encoder.h"
#include "vision/llava_test_support.h"
#include "vision/vision_cuda_test_support.h"
#include "vision/vlm_test_support.h"

namespace ib {
namespace {

using llava_test::TinyLlava;

constexpr int32_t kImageToken = 7;

// tiny_llava_config's model with one attention head (and one KV head) of 64 in the Llama.
std::string config_with_head_dim_64() {
  std::string json = llava_test::tiny_llava_config(/*vocab_size=*/101, kImageToken);
  const std::string from = R"("num_attention_heads": 4, "num_key_value_heads": 2)";
  const size_t at = json.find(from);
  IB_ASSERT(at != std::string::npos, "the tiny LLaVA config changed");
  json.replace(at, from.size(), R"("num_attention_heads": 1, "num_key_value_heads": 1)");
  return json;
}

using vision_cuda_test::rel_l2;
using vision_cuda_test::tolerance;

using llava_test::Prompt;

// Text, then per image its visual tokens and more text; pixels seeded from pixel_seed.
Prompt make_prompt(const LlavaConfig& llava, int images, uint64_t seed, uint64_t pixel_seed) {
  return llava_test::make_prompt(llava, images, seed, pixel_seed, kImageToken);
}

// The first generated token's logits of each prompt (request ids 1, 2, ...) on a backend.
std::vector<std::vector<float>> first_logits(const TinyLlava& m, const std::string& device,
                                             DType dtype, const std::vector<Prompt>& prompts) {
  auto backend = create_backend(BackendOptions{device, dtype, 0, std::nullopt});
  IB_ASSERT(backend.ok(), "backend creation");
  ModelConfig model;
  auto engine = vlm_test::load_engine(m.dir.string(), **backend, /*chunk=*/8, /*kv_blocks=*/16,
                                      /*max_len=*/256, model);
  EXPECT_TRUE(engine.ok()) << (engine.ok() ? "" : engine.error().message);
  if (!engine.ok()) return {};
  auto files = read_llava_files(m.dir.string());
  IB_ASSERT(files.ok(), "the tiny LLaVA's files");
  auto encoder = load_llava_encoder(m.dir.string(), files->config, **backend);
  IB_ASSERT(encoder.ok(), "the tiny LLaVA's encoder");
  IB_ASSERT((*engine)->set_vision_encoder(std::move(encoder).value()).ok(), "set encoder");
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerationRequest r;
    r.id = i + 1;
    r.prompt_tokens = prompts[i].tokens;
    r.images = prompts[i].images;
    r.max_tokens = 2;
    IB_ASSERT((*engine)->add_request(std::move(r)).ok(), "add_request");
  }
  std::vector<std::vector<float>> logits(prompts.size());
  for (int step = 0; (*engine)->has_unfinished(); ++step) {
    IB_ASSERT(step < 1000, "the engine did not finish");
    auto out = (*engine)->step();
    EXPECT_TRUE(out.ok()) << (out.ok() ? "" : out.error().message);
    if (!out.ok()) return {};
    for (TokenEvent& e : out->events) {
      if (e.output_index == 0) logits[e.request_id - 1] = std::move(e.logits);
    }
  }
  return logits;
}

class LlavaEngineCuda : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped";
  }
};

TEST_P(LlavaEngineCuda, FirstLogitsMatchTheCpuEngine) {
  const TinyLlava m =
      llava_test::write_tiny_llava(std::filesystem::temp_directory_path() / "ib_llava_engine_cuda",
                                   config_with_head_dim_64(), false);
  const std::vector<Prompt> prompts = {make_prompt(m.llava, 1, 3, 4), make_prompt(m.llava, 2, 5, 6),
                                       make_prompt(m.llava, 1, 3, 99)};  // 1's text, other pixels
  const auto want = first_logits(m, "cpu", DType::kF32, prompts);
  const auto got = first_logits(m, "cuda", GetParam(), prompts);
  ASSERT_EQ(want.size(), prompts.size());
  ASSERT_EQ(got.size(), prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_FALSE(want[i].empty()) << "request " << i + 1;
    EXPECT_LT(rel_l2(got[i], want[i]), tolerance(GetParam())) << "request " << i + 1;
  }
  // The comparison sees the images: prompts 1 and 3 differ in their image's pixels only (the
  // towers themselves are compared within tighter bounds by vision_cuda_test).
  const double image_effect = rel_l2(want[2], want[0]);
  ::testing::Test::RecordProperty("image_effect_rel_l2", std::to_string(image_effect));
  EXPECT_GT(image_effect, 1e-3);
  std::filesystem::remove_all(m.dir);
}

std::string dtype_param(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, LlavaEngineCuda,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16), dtype_param);

}  // namespace
}  // namespace ib
