// Qwen2-VL through the engine on the CUDA backend against the same engine on the CPU backend (the
// oracle): the tiny Qwen2-VL of qwen2vl_test_support with its language model on one attention
// head of 64 (a head size the CUDA attention takes; mrope_section [8, 12, 12]), loaded as the
// engine tests load it; two requests with one and two images of different grids, prefill in
// chunks of 8 tokens. The images go through the vision tower on the CUDA vision ops (the 2-D
// rotary on the device), their embeddings into the prompt, and the Qwen2 rotates each token's
// M-RoPE sections on the CUDA rope op; decode steps past the prompt take the fused decode ops.
// Stated tolerance on every generated token's logits while the two engines' tokens agree,
// relative L2 against the CPU's: fp32 1e-4, fp16 1e-2, bf16 3e-2; and the images must matter:
// the CPU's first logits of the same prompt with other pixels differ by more than 1e-3.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend_factory.h"
#include "backend/cuda/cuda_backend.h"
#include "core/rng.h"
#include "engine/engine.h"
#include "model/safetensors.h"
#include "vision/qwen2vl_encoder.h"
#include "vision/qwen2vl_test_support.h"
#include "vision/vision_cuda_test_support.h"
#include "vision/vlm_test_support.h"

namespace ib {
namespace {

using qwen2vl_test::kImagePad;
using qwen2vl_test::kVisionEnd;
using qwen2vl_test::kVisionStart;

using vision_cuda_test::rel_l2;
using vision_cuda_test::tolerance;

// kTinyConfig with one attention head (and one KV head) of 64 and M-RoPE sections summing to 32.
std::string config_with_head_dim_64() {
  std::string json = qwen2vl_test::kTinyConfig;
  for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
           {R"("num_attention_heads": 4, "num_key_value_heads": 2)",
            R"("num_attention_heads": 1, "num_key_value_heads": 1)"},
           {R"("mrope_section": [2, 3, 3])", R"("mrope_section": [8, 12, 12])"}}) {
    const size_t at = json.find(from);
    IB_ASSERT(at != std::string::npos, "the tiny Qwen2-VL config changed");
    json.replace(at, from.size(), to);
  }
  return json;
}

// config.json, preprocessor_config.json and model.safetensors (transformers 5's names) in dir.
Qwen2VlConfig write_checkpoint(const std::filesystem::path& dir) {
  const std::string json = config_with_head_dim_64();
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "config.json") << json;
  std::ofstream(dir / "preprocessor_config.json") << qwen2vl_test::kTinyPreprocessor;
  auto config = parse_qwen2vl_config(json, "tiny");
  IB_ASSERT(config.ok(), "the tiny config does not parse");
  std::vector<SafetensorsWriteTensor> tensors;
  auto add = [&](std::string n, std::vector<int64_t> shape, const std::vector<float>& v) {
    tensors.push_back({std::move(n), DType::kF32, std::move(shape), vlm_test::bytes_of(v)});
  };
  for (const auto& [n, v] : qwen2vl_test::vision_weights(*config, 41)) {
    add(n, qwen2vl_test::vision_shape(n, *config), v);
  }
  vlm_test::tiny_text_model({64, 64, 128, 128, 2, /*qkv_bias=*/true}, 78, add);
  IB_ASSERT(write_safetensors((dir / "model.safetensors").string(), tensors).ok(),
            "cannot write the tiny Qwen2-VL");
  return *config;
}

// Text, then per image <|vision_start|><|image_pad|><|vision_end|> and more text; images of grids
// 1 x 6 x 10 and 1 x 4 x 4 with seeded pixel values.
GenerationRequest make_request(const Qwen2VlConfig& config, uint64_t id, int images,
                               uint64_t pixel_seed) {
  GenerationRequest r;
  r.id = id;
  r.max_tokens = 3;
  r.prompt_tokens = {3, 4, 5};
  std::vector<Qwen2VlPixels> pixels;
  const std::array<std::array<int64_t, 3>, 2> grids = {{{1, 6, 10}, {1, 4, 4}}};
  Rng rng(pixel_seed);
  for (int i = 0; i < images; ++i) {
    r.prompt_tokens.insert(r.prompt_tokens.end(), {kVisionStart, kImagePad, kVisionEnd});
    r.prompt_tokens.insert(r.prompt_tokens.end(), static_cast<size_t>(2 + i), 20 + i);
    Qwen2VlPixels p;
    p.grid_thw = grids[static_cast<size_t>(i)];
    p.values = vlm_test::seeded(
        rng, p.grid_thw[0] * p.grid_thw[1] * p.grid_thw[2] * config.vision.patch_values(), 0, 2.0f);
    pixels.push_back(std::move(p));
  }
  IB_ASSERT(prepare_qwen2vl_request(config, std::move(pixels), r).ok(), "prepare");
  return r;
}

struct Generated {
  std::vector<std::vector<float>> logits;  // per generated token
  std::vector<int32_t> tokens;
};

std::map<uint64_t, Generated> generate(const std::filesystem::path& dir, const std::string& device,
                                       DType dtype,
                                       const std::vector<GenerationRequest>& requests) {
  auto backend = create_backend(BackendOptions{device, dtype, 0, std::nullopt});
  IB_ASSERT(backend.ok(), "backend creation");
  ModelConfig model;
  auto engine = vlm_test::load_engine(dir.string(), **backend, /*chunk=*/8, /*kv_blocks=*/16,
                                      /*max_len=*/256, model);
  EXPECT_TRUE(engine.ok()) << (engine.ok() ? "" : engine.error().message);
  if (!engine.ok()) return {};
  auto files = read_qwen2vl_files(dir.string());
  IB_ASSERT(files.ok(), "the tiny Qwen2-VL's files");
  auto encoder = load_qwen2vl_encoder(dir.string(), files->config, **backend);
  IB_ASSERT(encoder.ok(), "the tiny Qwen2-VL's encoder");
  IB_ASSERT((*engine)->set_vision_encoder(std::move(encoder).value()).ok(), "set encoder");
  for (const GenerationRequest& r : requests) {
    IB_ASSERT((*engine)->add_request(r).ok(), "add_request");
  }
  std::map<uint64_t, Generated> out;
  for (int step = 0; (*engine)->has_unfinished(); ++step) {
    IB_ASSERT(step < 1000, "the engine did not finish");
    auto s = (*engine)->step();
    EXPECT_TRUE(s.ok()) << (s.ok() ? "" : s.error().message);
    if (!s.ok()) return {};
    for (TokenEvent& e : s->events) {
      out[e.request_id].logits.push_back(std::move(e.logits));
      out[e.request_id].tokens.push_back(e.token);
    }
  }
  return out;
}

class Qwen2VlEngineCuda : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device: GPU test skipped";
  }
};

TEST_P(Qwen2VlEngineCuda, LogitsMatchTheCpuEngine) {
  const auto dir = std::filesystem::temp_directory_path() / "ib_qwen2vl_engine_cuda";
  const Qwen2VlConfig config = write_checkpoint(dir);
  const std::vector<GenerationRequest> requests = {
      make_request(config, 1, 1, 7), make_request(config, 2, 2, 8),
      make_request(config, 3, 1, 99)};  // request 1's prompt, other pixels
  const auto want = generate(dir, "cpu", DType::kF32, requests);
  const auto got = generate(dir, "cuda", GetParam(), requests);
  ASSERT_EQ(want.size(), requests.size());
  ASSERT_EQ(got.size(), requests.size());
  for (const auto& [id, w] : want) {
    const Generated& g = got.at(id);
    ASSERT_EQ(g.logits.size(), w.logits.size()) << "request " << id;
    // Token i's logits follow the tokens before it: compared while the engines agree on them.
    for (size_t i = 0; i < w.logits.size() && (i == 0 || g.tokens[i - 1] == w.tokens[i - 1]); ++i) {
      EXPECT_LT(rel_l2(g.logits[i], w.logits[i]), tolerance(GetParam()))
          << "request " << id << " token " << i;
    }
  }
  const double image_effect = rel_l2(want.at(3).logits[0], want.at(1).logits[0]);
  ::testing::Test::RecordProperty("image_effect_rel_l2", std::to_string(image_effect));
  EXPECT_GT(image_effect, 1e-3);
  std::filesystem::remove_all(dir);
}

std::string dtype_param(const ::testing::TestParamInfo<DType>& info) {
  return std::string(dtype_name(info.param));
}

INSTANTIATE_TEST_SUITE_P(Dtypes, Qwen2VlEngineCuda,
                         ::testing::Values(DType::kF32, DType::kBF16, DType::kF16), dtype_param);

}  // namespace
}  // namespace ib
