// The vision half of a LLaVA checkpoint's config.json (LlavaForConditionalGeneration): the CLIP
// vision tower (vision_config, with CLIPVisionConfig's defaults where a field is absent), the
// projector, the image token and how many tokens an image becomes.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace ib {

struct ClipVisionConfig {
  int64_t hidden_size = 768;  // D
  int64_t intermediate_size = 3072;
  int num_hidden_layers = 12;
  int num_attention_heads = 12;
  int64_t image_size_px = 224;
  int64_t patch_size_px = 32;
  double layer_norm_eps = 1e-5;
  // hidden_act: "quick_gelu" (CLIP's) only.

  int64_t patches_per_image() const {
    return (image_size_px / patch_size_px) * (image_size_px / patch_size_px);
  }
  int64_t head_dim() const { return hidden_size / num_attention_heads; }
};

struct LlavaConfig {
  ClipVisionConfig vision;
  int64_t text_hidden_size = 4096;  // text_config.hidden_size (LlamaConfig's default)
  int64_t image_token_id = 32000;   // image_token_id, or image_token_index (older files)
  int vision_feature_layer = -2;    // hidden_states index: -2 is the penultimate layer's output
  bool drop_class_token = true;     // vision_feature_select_strategy "default"; "full" keeps it
  bool projector_bias = true;       // multimodal_projector_bias
  // projector_hidden_act: "gelu" (erf) only.

  // The encoder layers that run: hidden_states[k] is the output after k layers (0: the
  // embeddings after pre_layrnorm), a negative k counts from num_hidden_layers + 1.
  int layers_to_run() const {
    return vision_feature_layer >= 0 ? vision_feature_layer
                                     : vision.num_hidden_layers + 1 + vision_feature_layer;
  }
  // The visual tokens one image becomes (576 for LLaVA-1.5: 336 / 14 squared).
  int64_t tokens_per_image() const {
    return vision.patches_per_image() + (drop_class_token ? 0 : 1);
  }
};

// A config.json whose architectures hold LlavaForConditionalGeneration. Refused, by name: another
// vision model than clip_vision_model, another hidden_act or projector_hidden_act, a feature
// layer outside the tower, a list of feature layers, a strategy other than default or full, an
// image size that is not a whole number of patches. origin names the file in errors.
Result<LlavaConfig> parse_llava_config(std::string_view json, std::string_view origin);

}  // namespace ib
