// Test support (vision tests only): a tiny LLaVA config, its vision tensors seeded under
// transformers' names, a safetensors writer for them, and an independent double-precision
// reference of the vision tower and projector written from transformers' modeling code
// (CLIPVisionEmbeddings, CLIPEncoderLayer, LlavaMultiModalProjector).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "vision/llava_config.h"

namespace ib::llava_test {

using HostWeights = std::map<std::string, std::vector<float>>;
using Matrix = std::vector<std::vector<double>>;  // (rows, cols)

// A tiny LLaVA: 28 px images of 7 px patches (16 patches), D 32, 4 heads, F 48, 3 layers of
// which 2 run (feature layer -2), text hidden 40.
extern const char* const kTinyConfig;

LlavaConfig tiny_config(std::string_view json = kTinyConfig);

// Every tensor of a full checkpoint (all layers, post_layernorm), seeded, plus a language model
// tensor the vision loader must leave alone (model.language_model.norm.weight, 40 wide).
HostWeights host_weights(const LlavaConfig& config, uint64_t seed);

// A checkpoint tensor's shape (the vision schema's, or a 1-D norm's).
std::vector<int64_t> shape_of(const std::string& name, const LlavaConfig& config);

// Writes weights as one safetensors file under the temporary directory; returns its path.
std::string write_checkpoint(const HostWeights& weights, const LlavaConfig& config,
                             const std::string& file);

// One image's visual tokens' embeddings (tokens_per_image, text hidden) from pixels (3, S, S).
Matrix reference_image(const HostWeights& w, const LlavaConfig& config, const float* pixels);

// Seeded pixel values of images images, uniform in [-2, 2].
std::vector<float> random_pixels(int64_t images, const LlavaConfig& config, uint64_t seed);

}  // namespace ib::llava_test
