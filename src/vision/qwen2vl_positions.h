// Qwen2-VL's 3-D positions of a prompt for multimodal RoPE, as transformers' get_rope_index
// (Qwen2VLModel) computes them for one sequence with images: text tokens take (i, i, i)
// continuing from the previous chunk's maximum + 1; an image's tokens (after the 2 x 2 merge)
// take (t, h, w) of their place in the merged grid, offset by the position where the image
// starts. Tokens after the prompt continue from the maximum + 1 (the engine does that).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "core/result.h"
#include "vision/qwen2vl_config.h"

namespace ib {

// The (3, L) row-major positions (temporal, height, width) of a prompt of L tokens whose images
// have the patch grids grid_thw (before the merge), in prompt order. An image counts where a
// vision_start token is followed by the image token; its tokens run from the first image token
// at or after the previous image's end. Without such images: (i, i, i). User errors: another
// number of images than grids, a video (the video token after vision_start), an image whose
// tokens do not fit the prompt.
Result<std::vector<int32_t>> qwen2vl_mrope_positions(
    std::span<const int32_t> token_ids, const Qwen2VlConfig& config,
    std::span<const std::array<int64_t, 3>> grid_thw);

}  // namespace ib
