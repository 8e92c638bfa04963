// Qwen2-VL's image preprocessing (transformers' Qwen2VLImageProcessor): smart_resize to a size
// whose sides are multiples of patch x merge (28) with the pixel count within [min_pixels,
// max_pixels], bicubic resize, rescale and normalise (clip_preprocess's arithmetic per backend),
// then the patches cut as the processor flattens them: one row per patch in merge-window order
// (t, h / m, w / m, m, m), each row (channel, temporal, y, x), a single image repeated over the
// temporal_patch_size frames.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/result.h"
#include "vision/clip_preprocess.h"
#include "vision/image.h"
#include "vision/qwen2vl_config.h"

namespace ib {

// (height, width) as transformers' smart_resize: each side rounded to the nearest multiple of
// factor (half to even, as Python's round); when the area passes max_pixels both scaled by
// sqrt(h w / max_pixels) and floored to multiples, when under min_pixels scaled up and ceiled.
// A side floored to 0 (an extreme aspect ratio) is kept at factor, where transformers would fail
// later. User errors: a side under factor, an aspect ratio over 200.
Result<std::array<int64_t, 2>> qwen2vl_smart_resize(int64_t height_px, int64_t width_px,
                                                    int64_t factor_px, int64_t min_pixels,
                                                    int64_t max_pixels);

struct Qwen2VlPixels {
  std::vector<float> values;                  // (grid_t grid_h grid_w, 3 T p p)
  std::array<int64_t, 3> grid_thw{};          // patches: (t, h, w)
  int64_t tokens(int64_t merge_size) const {  // visual tokens after the merge
    return grid_thw[0] * grid_thw[1] * grid_thw[2] / (merge_size * merge_size);
  }
};

// One image's pixel values and grid.
Result<Qwen2VlPixels> preprocess_qwen2vl(const Image& image, const Qwen2VlPreprocessConfig& config,
                                         ImageBackend backend);

// The patch rows of normalised planes (3, H, W) of one frame repeated over the temporal patch,
// H and W multiples of patch x merge (the flattening alone, for tests and preprocess_qwen2vl).
Qwen2VlPixels qwen2vl_patchify(const std::vector<float>& planes, int64_t height_px,
                               int64_t width_px, const Qwen2VlPreprocessConfig& config);

}  // namespace ib
