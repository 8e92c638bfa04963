// A model's vision side for serve: the engine's VisionEncoder and the server's ImagePrompter of a
// vision-language checkpoint directory (LLaVA today), from vLLM's multimodal flags. Built only
// with image support (INFERBENCH_VISION); without it a vision-language model is refused.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/result.h"
#include "engine/engine.h"
#include "server/image_prompter.h"

namespace ib {

// vLLM's --limit-mm-per-prompt and --allowed-local-media-path.
struct ImageFlags {
  std::string limit_mm_per_prompt;       // '{"image": N}' or image=N; empty: 1 image
  std::string allowed_local_media_path;  // empty: file:// URLs are refused
};

struct ModelVision {
  std::shared_ptr<const ImagePrompter> prompter;  // null: a text-only model
  std::function<Result<std::unique_ptr<VisionEncoder>>(Backend&)> encoder;
};

// The vision side of the model at path (its weights directory). A text-only model gets none
// (its image parts are refused by name); image flags given for one are a user error.
Result<ModelVision> model_vision(const ModelConfig& model, const std::string& path,
                                 const ImageFlags& flags);

}  // namespace ib
