// The LLaVA vision path on the CPU backend against an independent double-precision reference
// written from transformers' modeling code (CLIPVisionEmbeddings, CLIPEncoderLayer,
// LlavaMultiModalProjector), from a checkpoint written with transformers' tensor names; the
// loader's refusals; batching; and config.json's reading.
#include "vision/clip_vision_tower.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>

#include "backend/cpu/cpu_backend.h"
#include "core/rng.h"
#include "vision/llava_test_support.h"

namespace ib {
namespace {

using llava_test::host_weights;
using llava_test::HostWeights;
using llava_test::kTinyConfig;
using llava_test::Matrix;
using llava_test::random_pixels;
using llava_test::reference_image;
using llava_test::shape_of;
using llava_test::tiny_config;
using llava_test::write_checkpoint;

std::vector<float> encode(CpuBackend& backend, const LlavaVisionWeights& weights,
                          const LlavaConfig& config, const std::vector<float>& pixels,
                          int64_t images, VisionScratch* scratch = nullptr) {
  const int64_t rows = images * config.tokens_per_image(), dt = config.text_hidden_size;
  auto buffer = backend.alloc(static_cast<size_t>(rows * dt) * sizeof(float), MemoryTag::kOther);
  IB_ASSERT(buffer.ok(), "test allocation");
  const Tensor out = buffer->view(DType::kF32, {rows, dt});
  const Status status = encode_llava_images(backend, weights, config, pixels, images, out, scratch);
  IB_ASSERT(status.ok(), "encode failed");
  std::vector<float> host(static_cast<size_t>(rows * dt));
  backend.copy_to_host(out, host.data());
  return host;
}

TEST(ClipVisionTower, MatchesTheDoubleReferenceFromATransformersNamedCheckpoint) {
  for (const char* strategy : {"default", "full"}) {
    std::string json = kTinyConfig;
    json.replace(json.find("\"default\""), 9, std::string("\"") + strategy + "\"");
    const LlavaConfig config = tiny_config(json);
    EXPECT_EQ(config.layers_to_run(), 2);
    EXPECT_EQ(config.tokens_per_image(), std::string(strategy) == "default" ? 16 : 17);
    const HostWeights host = host_weights(config, 21);
    const std::string path = write_checkpoint(host, config, "ib_llava_tiny.safetensors");
    auto checkpoint = SafetensorsCheckpoint::open(path);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.error().message;
    CpuBackend backend(2);
    auto weights = load_llava_vision_weights(backend, **checkpoint, config);
    ASSERT_TRUE(weights.ok()) << weights.error().message;
    ASSERT_EQ(weights->layers.size(), 2u);
    const int64_t images = 2, s = config.vision.image_size_px;
    const auto pixels = random_pixels(images, config, 5);
    const auto got = encode(backend, *weights, config, pixels, images);
    double worst = 0, largest = 0;
    for (int64_t n = 0; n < images; ++n) {
      const Matrix want = reference_image(host, config, pixels.data() + n * 3 * s * s);
      ASSERT_EQ(static_cast<int64_t>(want.size()), config.tokens_per_image());
      for (size_t r = 0; r < want.size(); ++r) {
        for (size_t c = 0; c < want[r].size(); ++c) {
          const size_t at = (static_cast<size_t>(n) * want.size() + r) * want[r].size() + c;
          worst = std::max(worst, std::abs(got[at] - want[r][c]));
          largest = std::max(largest, std::abs(want[r][c]));
        }
      }
    }
    EXPECT_GT(largest, 0.1);
    EXPECT_LE(worst, 1e-4 * std::max(1.0, largest)) << strategy << ": largest " << largest;
    std::filesystem::remove(path);
  }
}

// Every tensor layout (clip_vision_tower.h) loads the same weights: the llava-hf checkpoints'
// names, and transformers 5.17's without CLIP's vision_model level.
TEST(ClipVisionTower, EveryLayoutLoadsTheSameWeights) {
  const LlavaConfig config = tiny_config();
  const HostWeights host = host_weights(config, 4);  // transformers 5's names
  const struct {
    const char* tower;
    const char* projector;
  } layouts[] = {{"model.vision_tower.vision_model.", "model.multi_modal_projector."},
                 {"vision_tower.vision_model.", "multi_modal_projector."},
                 {"vision_tower.", "multi_modal_projector."},
                 {"model.vision_tower.", "model.multi_modal_projector."}};
  const std::string tower = "model.vision_tower.vision_model.";
  const std::string projector = "model.multi_modal_projector.";
  CpuBackend backend(2);
  const auto pixels = random_pixels(1, config, 8);
  std::vector<std::vector<float>> outputs;
  for (const auto& layout : layouts) {
    std::vector<SafetensorsWriteTensor> tensors;
    for (const auto& [name, values] : host) {
      std::string bytes(values.size() * sizeof(float), '\0');
      std::memcpy(bytes.data(), values.data(), bytes.size());
      std::string renamed = name;
      if (name.rfind(tower, 0) == 0) renamed = layout.tower + name.substr(tower.size());
      if (name.rfind(projector, 0) == 0) renamed = layout.projector + name.substr(projector.size());
      tensors.push_back({renamed, DType::kF32, shape_of(name, config), std::move(bytes)});
    }
    const auto path =
        (std::filesystem::temp_directory_path() / "ib_llava_layout.safetensors").string();
    ASSERT_TRUE(write_safetensors(path, tensors).ok());
    auto checkpoint = SafetensorsCheckpoint::open(path);
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.error().message;
    auto loaded = load_llava_vision_weights(backend, **checkpoint, config);
    ASSERT_TRUE(loaded.ok()) << layout.tower << ": " << loaded.error().message;
    outputs.push_back(encode(backend, *loaded, config, pixels, 1));
    std::filesystem::remove(path);
  }
  for (size_t i = 1; i < outputs.size(); ++i) EXPECT_EQ(outputs[0], outputs[i]) << layouts[i].tower;
}

TEST(ClipVisionTower, BatchedImagesEqualOneAtATime) {
  const LlavaConfig config = tiny_config();
  CpuBackend backend(2);
  auto weights = random_llava_vision_weights(backend, config, 9, 0.2f);
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const int64_t s = config.vision.image_size_px, per = 3 * s * s;
  const auto pixels = random_pixels(3, config, 6);
  const auto batched = encode(backend, *weights, config, pixels, 3);
  for (int64_t n = 0; n < 3; ++n) {
    const std::vector<float> one(pixels.begin() + n * per, pixels.begin() + (n + 1) * per);
    const auto alone = encode(backend, *weights, config, one, 1);
    const auto rows = static_cast<std::ptrdiff_t>(alone.size());
    EXPECT_TRUE(std::equal(alone.begin(), alone.end(), batched.begin() + n * rows)) << n;
  }
}

// A scratch kept between calls (the engine's encoder keeps one) grows to the larger batch and is
// reused by smaller ones without changing a value: 1 image, then 3, then 1 and 3 again.
TEST(ClipVisionTower, AKeptScratchGivesTheSameFeatures) {
  const LlavaConfig config = tiny_config();
  CpuBackend backend(2);
  auto weights = random_llava_vision_weights(backend, config, 9, 0.2f);
  ASSERT_TRUE(weights.ok()) << weights.error().message;
  const int64_t per = 3 * config.vision.image_size_px * config.vision.image_size_px;
  const auto three = random_pixels(3, config, 6);
  const std::vector<float> one(three.begin() + per, three.begin() + 2 * per);
  const auto want_three = encode(backend, *weights, config, three, 3);
  const auto want_one = encode(backend, *weights, config, one, 1);
  VisionScratch scratch(backend);
  EXPECT_EQ(encode(backend, *weights, config, one, 1, &scratch), want_one);
  const int64_t small_bytes = scratch.bytes();
  EXPECT_EQ(encode(backend, *weights, config, three, 3, &scratch), want_three);
  const int64_t large_bytes = scratch.bytes();
  EXPECT_GT(large_bytes, small_bytes);
  EXPECT_EQ(encode(backend, *weights, config, one, 1, &scratch), want_one);
  EXPECT_EQ(encode(backend, *weights, config, three, 3, &scratch), want_three);
  EXPECT_EQ(scratch.bytes(), large_bytes);  // grown once, then reused
}

TEST(ClipVisionTower, TheLoaderNamesWhatIsMissingForeignOrMisshapen) {
  const LlavaConfig config = tiny_config();
  CpuBackend backend(1);
  auto load_with = [&](const std::function<void(HostWeights&)>& edit) {
    HostWeights host = host_weights(config, 3);
    edit(host);
    const std::string path = write_checkpoint(host, config, "ib_llava_bad.safetensors");
    auto checkpoint = SafetensorsCheckpoint::open(path);
    IB_ASSERT(checkpoint.ok(), "test checkpoint");
    auto weights = load_llava_vision_weights(backend, **checkpoint, config);
    std::filesystem::remove(path);
    return weights.ok() ? std::string("(loaded)") : weights.error().message;
  };
  const std::string k = "model.vision_tower.vision_model.encoder.layers.1.self_attn.k_proj.bias";
  EXPECT_NE(load_with([&](HostWeights& w) { w.erase(k); }).find("has no " + k + " [32]"),
            std::string::npos);
  EXPECT_NE(load_with([&](HostWeights& w) {
              w.erase("model.multi_modal_projector.linear_2.bias");
            }).find("linear_2.bias"),
            std::string::npos);
  EXPECT_NE(load_with([](HostWeights& w) {
              w["model.vision_tower.vision_model.encoder.layers.0.self_attn.qkv.weight"] =
                  std::vector<float>(32, 0.0f);
            }).find("does not have"),
            std::string::npos);
  EXPECT_NE(load_with([](HostWeights& w) {
              w.erase("model.vision_tower.vision_model.embeddings.class_embedding");
            }).find("has none of"),
            std::string::npos);
  EXPECT_EQ(load_with([](HostWeights&) {}), "(loaded)");
  // A config.json that is not the checkpoint's: the first tensor whose shape differs is named.
  const HostWeights host = host_weights(config, 3);
  const std::string path = write_checkpoint(host, config, "ib_llava_shape.safetensors");
  auto checkpoint = SafetensorsCheckpoint::open(path);
  ASSERT_TRUE(checkpoint.ok());
  std::string json = kTinyConfig;
  const std::string from = "\"intermediate_size\": 48";
  json.replace(json.find(from), from.size(), "\"intermediate_size\": 64");
  auto wrong = load_llava_vision_weights(backend, **checkpoint, tiny_config(json));
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.error().message.find("layers.0.mlp.fc1.weight is [48, 32] in the checkpoint, "
                                       "[64, 32] by config.json"),
            std::string::npos)
      << wrong.error().message;
  std::filesystem::remove(path);
}

TEST(LlavaConfig, ReadsLlava15AndRefusesWhatItDoesNotRun) {
  std::ifstream in(std::filesystem::path(std::getenv("INFERBENCH_SOURCE_DIR") != nullptr
                                             ? std::getenv("INFERBENCH_SOURCE_DIR")
                                             : ".") /
                   "src/vision/testdata/llava-1.5-7b-config.json");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto config = parse_llava_config(text, "llava-1.5-7b");
  ASSERT_TRUE(config.ok()) << config.error().message;
  EXPECT_EQ(config->tokens_per_image(), 576);
  EXPECT_EQ(config->layers_to_run(), 23);
  EXPECT_EQ(config->text_hidden_size, 4096);
  EXPECT_EQ(config->image_token_id, 32000);
  EXPECT_EQ(config->vision.head_dim(), 64);
  const std::pair<const char*, const char*> bad[] = {
      {R"({"text_config": {}})", "no \"vision_config\""},
      {R"({"vision_config": {"model_type": "siglip_vision_model"}})", "clip_vision_model"},
      {R"({"vision_config": {"hidden_act": "gelu"}})", "quick_gelu"},
      {R"({"vision_config": {}, "projector_hidden_act": "relu"})", "\"gelu\" only"},
      {R"({"vision_config": {}, "vision_feature_layer": [-2, -5]})", "a list"},
      {R"({"vision_config": {}, "vision_feature_layer": 13})", "-13..12"},
      {R"({"vision_config": {}, "vision_feature_select_strategy": "cls"})", "\"full\""},
      {R"({"vision_config": {"image_size": 30, "patch_size": 7}})", "multiple of patch_size"},
      {R"({"vision_config": {"hidden_size": 30}})", "num_attention_heads"}};
  for (const auto& [json, want] : bad) {
    auto r = parse_llava_config(json, "c.json");
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_NE(r.error().message.find(want), std::string::npos) << r.error().message;
  }
}

}  // namespace
}  // namespace ib
