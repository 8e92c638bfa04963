// The vision half of a Qwen2-VL checkpoint (Qwen2VLForConditionalGeneration): config.json's
// vision_config (Qwen2VLVisionConfig's defaults where a field is absent) and special tokens, and
// preprocessor_config.json (Qwen2VLImageProcessor: smart_resize bounds, patch sizes, rescale and
// normalisation).
#pragma once

#include <cstdint>
#include <string_view>

#include "core/result.h"
#include "vision/clip_preprocess.h"

namespace ib {

struct Qwen2VlVisionConfig {
  int depth = 32;
  int64_t embed_dim = 1280;   // D
  int64_t mlp_hidden = 5120;  // F = int(embed_dim * mlp_ratio)
  int num_heads = 16;
  int64_t patch_size_px = 14;
  int64_t spatial_merge_size = 2;
  int64_t temporal_patch_size = 2;
  // hidden_act "quick_gelu" only; in_channels 3 only; LayerNorms eps 1e-6 (fixed in the model).

  int64_t head_dim() const { return embed_dim / num_heads; }
  // Columns of one patch row of pixel values: channels x temporal x p x p.
  int64_t patch_values() const { return 3 * temporal_patch_size * patch_size_px * patch_size_px; }
  int64_t merge_units() const { return spatial_merge_size * spatial_merge_size; }
};

struct Qwen2VlConfig {
  Qwen2VlVisionConfig vision;
  int64_t text_hidden_size = 8192;  // vision_config.hidden_size: the merger's output
  int64_t image_token_id = 151655;  // <|image_pad|>
  int64_t video_token_id = 151656;
  int64_t vision_start_token_id = 151652;  // <|vision_start|>
  int64_t vision_end_token_id = 151653;    // <|vision_end|>
};

// A config.json whose architectures hold Qwen2VLForConditionalGeneration. Refused, by name:
// another hidden_act than quick_gelu, in_channels other than 3, embed_dim not a multiple of
// num_heads, a head_dim not a multiple of 4 (the 2-D rotary splits it in quarters), a merger
// output other than the language model's hidden_size. origin names the file in errors.
Result<Qwen2VlConfig> parse_qwen2vl_config(std::string_view json, std::string_view origin);

struct Qwen2VlPreprocessConfig {
  bool do_resize = true;
  int64_t min_pixels = 56 * 56;         // min_pixels, or size.shortest_edge
  int64_t max_pixels = 28 * 28 * 1280;  // max_pixels, or size.longest_edge
  int64_t patch_size_px = 14;
  int64_t temporal_patch_size = 2;
  int64_t merge_size = 2;
  // The rescale and normalisation (do_rescale, rescale_factor, do_normalize, image_mean,
  // image_std; CLIP's mean and std by default); its resize and crop are off.
  ClipPreprocessConfig normalize;

  int64_t factor_px() const { return patch_size_px * merge_size; }  // 28
};

// A preprocessor_config.json of Qwen2VLImageProcessor. min_pixels / max_pixels override size's
// shortest_edge / longest_edge, as transformers reads them. Refused: a resample other than
// bicubic (3), min_pixels > max_pixels. origin names the file in errors.
Result<Qwen2VlPreprocessConfig> parse_qwen2vl_preprocess_config(std::string_view json,
                                                                std::string_view origin);

// The preprocessor must cut the patches the tower embeds: patch, temporal and merge sizes equal.
Status check_qwen2vl_preprocess(const Qwen2VlPreprocessConfig& preprocess,
                                const Qwen2VlVisionConfig& vision, std::string_view origin);

}  // namespace ib
