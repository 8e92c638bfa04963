// Internal to engine/: the language model of a LlavaForConditionalGeneration (or
// Qwen2VLForConditionalGeneration) checkpoint seen
// under a causal LM's names, so the llama architecture's schema loads it. transformers 5 keeps it
// under model.language_model. (lm_head. at the top); the llava-hf conversions under
// language_model.model. and language_model.lm_head.. The vision tower's and projector's tensors
// are left out of the view (src/vision loads them from the checkpoint itself).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "model/safetensors.h"

namespace ib::detail {

// Whose layouts: LLaVA's, or Qwen2-VL's (transformers 5's model.language_model. and
// model.visual., the published files' model. and visual.).
enum class ViewLayout { kLlava, kQwen2Vl };

// The view's name of a checkpoint tensor, or "" when it is not the language model's.
std::string language_model_name(const std::string& checkpoint_name,
                                ViewLayout layout = ViewLayout::kLlava);

// The view over checkpoint (which it keeps open).
std::unique_ptr<SafetensorsCheckpoint> language_model_view(
    std::unique_ptr<SafetensorsCheckpoint> checkpoint, ViewLayout layout = ViewLayout::kLlava);

}  // namespace ib::detail
