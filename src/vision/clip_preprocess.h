// CLIP's image preprocessing (transformers' CLIPImageProcessor, which LLaVA-1.5 uses): resize the
// shortest side with bicubic filtering, center crop, rescale, normalise, as the checkpoint's
// preprocessor_config.json says, into the (3, H, W) pixel values the vision tower reads.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "vision/image.h"

namespace ib {

// Which transformers backend to reproduce. transformers 5 picks torchvision when it is installed
// (CLIPImageProcessor); CLIPImageProcessorPil is PIL's. They differ in the resize's fixed point
// and in the order of the rescale and the normalisation; both floor an odd crop margin.
enum class ImageBackend { kTorchvision, kPil };
Result<ImageBackend> parse_image_backend(std::string_view name);  // "torchvision" or "pil"

struct ClipPreprocessConfig {
  bool do_resize = true;
  int64_t shortest_edge_px = 336;  // size.shortest_edge
  bool do_center_crop = true;
  int64_t crop_height_px = 336;  // crop_size
  int64_t crop_width_px = 336;
  bool do_rescale = true;
  double rescale_factor = 1.0 / 255.0;
  bool do_normalize = true;
  std::array<double, 3> image_mean{0.48145466, 0.4578275, 0.40821073};
  std::array<double, 3> image_std{0.26862954, 0.26130258, 0.27577711};
};

// A preprocessor_config.json of a CLIP image processor (CLIPImageProcessor; LLaVA's). Refused:
// another resample than bicubic (3), a size other than {"shortest_edge": N}, a crop larger than
// the resize. origin names the file in errors.
Result<ClipPreprocessConfig> parse_clip_preprocess_config(std::string_view json,
                                                          std::string_view origin);

// The pixel values, (3, H, W) in RGB order, H x W the crop (or the resized image without one).
std::vector<float> preprocess_clip(const Image& image, const ClipPreprocessConfig& config,
                                   ImageBackend backend);

// The resized size (width, height) of a w x h image: the shortest side to shortest_edge_px, the
// other int(shortest_edge * long / short), as transformers' get_resize_output_image_size.
std::array<int64_t, 2> clip_resized_size(int64_t width_px, int64_t height_px,
                                         int64_t shortest_edge_px);

}  // namespace ib
