// Decoded images: PNG (libpng) and JPEG (libjpeg-turbo) bytes into 8-bit RGB, refusing corrupt
// data, other formats and images over a pixel cap before their pixels are allocated.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ib {

// An 8-bit RGB image, rows top to bottom.
struct Image {
  int64_t width_px = 0;
  int64_t height_px = 0;
  std::vector<uint8_t> rgb;  // (height_px, width_px, 3)

  uint8_t at(int64_t y, int64_t x, int channel) const {
    return rgb[static_cast<size_t>((y * width_px + x) * 3 + channel)];
  }
};

enum class ImageFormat { kUnknown, kPng, kJpeg, kGif, kWebp, kBmp };
std::string_view image_format_name(ImageFormat format);  // e.g. "image/png"
// The format the first bytes announce (magic numbers), kUnknown when none matches.
ImageFormat sniff_image_format(std::span<const uint8_t> bytes);

struct ImageLimits {
  int64_t max_pixels = 4096LL * 4096;  // width * height, checked from the header
};

// Decodes PNG or JPEG bytes as PIL's Image.open(...).convert("RGB") reads them: palettes and
// grayscale expanded, alpha dropped (not composited), 16-bit samples reduced to their high byte,
// JPEG with libjpeg-turbo's defaults (islow DCT, fancy upsampling), CMYK refused. Errors are
// user errors naming the problem ("PNG: CRC error", "image/gif is not supported").
Result<Image> decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits);

// A random image (random-mm's): one byte per sample, the top byte of each of seed's draws in
// (y, x, channel) order. Every target draws it so (the native one, and the chat target that sends
// it as PNG), so that they benchmark the same pixels.
Image random_rgb_image(int64_t width_px, int64_t height_px, uint64_t seed);

}  // namespace ib
