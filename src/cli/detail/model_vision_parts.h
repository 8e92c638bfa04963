// Private to cli/model_vision*.cpp (built with image support only): what the vision-language
// families' sides share, and each family's ModelVision from its checkpoint directory.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "cli/model_vision.h"
#include "core/result.h"
#include "targets/target.h"
#include "vision/image.h"
#include "vision/image_input.h"

namespace ib::detail {

// A request's image as RGB: its file decoded, or random bytes of its size from its seed.
Result<Image> request_image(const RequestImage& spec, const ImageLimits& limits);
// The image in errors: its file, or "a random W x H px image".
std::string describe_image(const RequestImage& spec);

// A prompt token that is one of reserved (the model's image token ids; a random prompt draws any
// id) becomes the nearest id below that is not (above where none is): the engine and the M-RoPE
// positions read every such id as part of an image.
int32_t unreserved_token(int32_t token, std::span<const int32_t> reserved);

// LlavaForConditionalGeneration: CLIP preprocessing, a fixed count of visual tokens an image.
Result<ModelVision> llava_vision(const std::string& dir, ImageInputPolicy policy);
// Qwen2VLForConditionalGeneration: dynamic resolution, M-RoPE positions.
Result<ModelVision> qwen2vl_vision(const std::string& dir, ImageInputPolicy policy);

}  // namespace ib::detail
