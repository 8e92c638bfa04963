// The per-format decoders behind decode_image (private to vision/).
#pragma once

#include <cstdint>
#include <span>

#include "core/result.h"
#include "vision/image.h"

namespace ib::detail {

Result<Image> decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits);
Result<Image> decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits);

// The pixel cap's error, shared by both decoders.
Error too_many_pixels(int64_t width_px, int64_t height_px, const ImageLimits& limits);

}  // namespace ib::detail
