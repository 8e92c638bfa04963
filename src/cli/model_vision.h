// A model's vision side for serve and run: the engine's VisionEncoder, the server's ImagePrompter
// and run's image preparation of a vision-language checkpoint directory (LLaVA, Qwen2-VL), from
// vLLM's multimodal flags. Built only with image support (INFERBENCH_VISION); without it a
// vision-language model is refused.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "engine/engine.h"
#include "server/image_prompter.h"
#include "targets/target.h"

namespace ib {

// vLLM's --limit-mm-per-prompt and --allowed-local-media-path.
struct ImageFlags {
  std::string limit_mm_per_prompt;       // '{"image": N}' or image=N; empty: 1 image
  std::string allowed_local_media_path;  // empty: file:// URLs are refused
};

struct ModelVision {
  std::shared_ptr<const ImagePrompter> prompter;  // null: a text-only model
  std::function<Result<std::unique_ptr<VisionEncoder>>(Backend&)> encoder;
  // run: each request's images (RequestSpec::images) loaded from their files or drawn at random,
  // preprocessed into RequestSpec::prepared_images, their visual tokens placed before the
  // prompt's tokens (input_len counts them; Qwen2-VL's between <|vision_start|> and
  // <|vision_end|>, with RequestSpec::mrope_positions). User errors name the request and the file.
  std::function<Status(std::vector<RequestSpec>&)> prepare_requests;
};

// The vision side of the model at path (its weights directory). A text-only model gets none
// (its image parts are refused by name); image flags given for one are a user error.
Result<ModelVision> model_vision(const ModelConfig& model, const std::string& path,
                                 const ImageFlags& flags);

}  // namespace ib
