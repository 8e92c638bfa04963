// The prompt side of an image: LlavaProcessor's expansion of each image placeholder token into
// the visual tokens whose embeddings the projector's outputs replace at prefill.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/result.h"

namespace ib {

struct ExpandedPrompt {
  std::vector<int32_t> token_ids;    // each placeholder repeated tokens_per_image times
  std::vector<int64_t> image_start;  // per image: the position of its first visual token
};

// Expands every image_token_id in token_ids to tokens_per_image copies. The prompt must hold one
// placeholder per image sent (num_images); a user error names both counts otherwise.
Result<ExpandedPrompt> expand_image_tokens(std::span<const int32_t> token_ids,
                                           int32_t image_token_id, int64_t tokens_per_image,
                                           int64_t num_images);
// The same with each image's own count (a dynamic-resolution model's: Qwen2-VL's
// Qwen2VLProcessor repeats <|image_pad|> grid_t grid_h grid_w / merge^2 times).
Result<ExpandedPrompt> expand_image_tokens(std::span<const int32_t> token_ids,
                                           int32_t image_token_id,
                                           std::span<const int64_t> tokens_per_image);

}  // namespace ib
