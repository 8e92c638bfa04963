// Test support (LLaVA tests only): a tiny LlavaForConditionalGeneration checkpoint directory
// (config.json, preprocessor_config.json, model.safetensors) with seeded weights under
// transformers' names, and the host copies of those weights for double-precision references.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "engine/detail/reference_model.h"
#include "engine/engine.h"
#include "vision/llava_test_support.h"

namespace ib::llava_test {

struct TinyLlava {
  std::filesystem::path dir;
  LlavaConfig llava;
  HostWeights vision;         // transformers 5 names
  testing::HostWeights text;  // the language model (a Llama), for the reference
};

// A LLaVA config.json: kTinyConfig's vision tower (28 px images of 7 px patches, 16 visual
// tokens) on a tiny Llama (hidden 64, 2 layers, 4 heads, 2 KV heads, FFN 128, EOS the last id).
std::string tiny_llava_config(int vocab_size, int image_token_id);

// Writes config_json (a LLaVA config whose text_config is a Llama and whose vision_config is
// kTinyConfig's tower), a preprocessor_config.json cropping to the tower's image size, and the
// seeded weights into dir; legacy: llava-hf's names (language_model.model.,
// language_model.lm_head., vision_tower., multi_modal_projector.).
TinyLlava write_tiny_llava(const std::filesystem::path& dir, std::string_view config_json,
                           bool legacy);

// A prompt with images: its token ids (image_token where the visual tokens go) and its images.
struct Prompt {
  std::vector<int32_t> tokens;
  std::vector<ImageInput> images;
};

// Text (ids from seed), then per image its visual tokens and more text; the images' pixels seeded
// from pixel_seed (random_pixels).
Prompt make_prompt(const LlavaConfig& llava, int images, uint64_t seed, uint64_t pixel_seed,
                   int32_t image_token);

}  // namespace ib::llava_test
