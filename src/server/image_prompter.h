// The served model's images (a vision-language model): a chat call's image_url parts loaded,
// preprocessed and placed in its prompt as the model's visual tokens. Implemented beside the
// model's vision encoder (cli/model_vision.h: LLaVA, Qwen2-VL); a server without one refuses
// images.
// Threading: place() is called from several encode-pool threads at once.
#pragma once

#include <cstdint>
#include <variant>
#include <vector>

#include "engine/engine.h"
#include "server/protocol.h"

namespace ib {

struct PromptWithImages {
  std::vector<int32_t> token_ids;  // each image's token expanded to its visual tokens
  std::vector<ImageInput> images;  // in prompt order
  // A multimodal-RoPE model's (Qwen2-VL's) positions of token_ids, (3, token_ids.size())
  // row-major; empty: the engine's default (position = index).
  std::vector<int32_t> mrope_positions;
};

class ImagePrompter {
 public:
  virtual ~ImagePrompter() = default;
  // What each kImagePlaceholder of the rendered prompt becomes before place() expands it.
  virtual int32_t image_token_id() const = 0;
  // token_ids holds image_token_id() once per image, images the parts in the same order. Errors
  // are 400s: an image that does not load, or one over a limit, names its part (ChatImage::param).
  virtual std::variant<PromptWithImages, ApiError> place(
      const std::vector<int32_t>& token_ids, const std::vector<ChatImage>& images) const = 0;
};

}  // namespace ib
