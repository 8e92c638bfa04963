// Antialiased bicubic resizing of 8-bit RGB, as PIL and torchvision compute it (private to
// vision/; clip_preprocess.h picks which).
#pragma once

#include <cstdint>

#include "vision/image.h"

namespace ib::detail {

// Both are the same separable filter (Keys' cubic, a = -0.5, widened by the scale when
// shrinking, taps normalised to sum 1), weights rounded to fixed point, a horizontal pass into an
// 8-bit image, then a vertical pass; they differ in the fixed point:
//   kPil:         22 fractional bits (Pillow's ImagingResample, 8 bpc)
//   kTorchvision: per axis, the most bits that keep the largest weight within int16 (ATen's
//                 uint8 antialiased upsampling, which torchvision's resize takes on the CPU)
enum class FixedPointRule { kPil, kTorchvision };

Image resize_bicubic(const Image& in, int64_t out_width_px, int64_t out_height_px,
                     FixedPointRule rule);

}  // namespace ib::detail
