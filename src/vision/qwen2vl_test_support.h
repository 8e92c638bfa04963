// Test support (Qwen2-VL tests only): a tiny Qwen2-VL (config.json, preprocessor_config.json,
// seeded tensors under transformers' names, a checkpoint writer), and independent double-precision
// references written from transformers' definitions: reshape-and-permute as numpy/torch do it,
// the vision tower (PatchEmbed, rot_pos_emb, Qwen2VLVisionBlock, PatchMerger) and get_rope_index
// in its chunk-list form.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "vision/qwen2vl_config.h"

namespace ib::qwen2vl_test {

using HostWeights = std::map<std::string, std::vector<float>>;
using Matrix = std::vector<std::vector<double>>;  // (rows, cols)

// A tiny Qwen2-VL: vision depth 2, embed_dim 32, 4 heads (head_dim 8), mlp_ratio 2, patches of
// 4 px, merge 2, temporal 2; a Qwen2 of hidden 64, 2 layers, 4 heads (head_dim 16), 2 KV heads,
// FFN 128, vocabulary 128, mrope_section [2, 3, 3]; image token 100, vision start 101, end 102,
// video 103. Its preprocessor: min_pixels 64, max_pixels 4096 (factor 8).
extern const char* const kTinyConfig;
extern const char* const kTinyPreprocessor;
constexpr int32_t kImagePad = 100, kVisionStart = 101, kVisionEnd = 102, kVideoPad = 103;

Qwen2VlConfig tiny_config();

// Every vision tensor under transformers 5's names (model.visual.), seeded.
HostWeights vision_weights(const Qwen2VlConfig& config, uint64_t seed);
std::vector<int64_t> vision_shape(const std::string& name, const Qwen2VlConfig& config);

// x, a row-major array of shape `shape`, permuted as x.transpose(perm) then flattened row-major
// (numpy's transpose / torch's permute followed by reshape).
std::vector<double> permute(const std::vector<double>& x, const std::vector<int64_t>& shape,
                            const std::vector<int>& perm);

// The vision tower's output (sum t h w / 4, text hidden) for images' patch rows (their
// (t h w, 3 T p p) rows one after the other) and grids.
Matrix reference_vision(const HostWeights& w, const Qwen2VlConfig& config,
                        const std::vector<float>& pixel_rows,
                        const std::vector<std::array<int64_t, 3>>& grids);

// get_rope_index's positions (3, L) row-major for one sequence with images.
std::vector<int32_t> reference_rope_index(const std::vector<int32_t>& ids,
                                          const Qwen2VlConfig& config,
                                          const std::vector<std::array<int64_t, 3>>& grids);

}  // namespace ib::qwen2vl_test
