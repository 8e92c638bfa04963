// Test helpers (vision tests and nothing else): images encoded in memory with libpng and
// libjpeg, and base64 for data URLs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vision/image.h"

namespace ib::test {

// A w x h image whose pixel (y, x, c) is (seed + 37 y + 11 x + 89 c) mod 256 (mixed by a hash
// when noisy, for resize tests).
Image pattern_image(int64_t width_px, int64_t height_px, int seed, bool noisy = false);

// PNG of 8-bit rows: channels 1 (gray), 2 (gray+alpha), 3 (RGB) or 4 (RGBA); bit_depth 8 or 16
// (16: each sample's bytes are (v, 255 - v), high byte first).
std::vector<uint8_t> encode_png(const std::vector<uint8_t>& samples, int64_t width_px,
                                int64_t height_px, int channels, int bit_depth = 8);
// A 1-bit grayscale PNG (bits: one value 0/1 per pixel).
std::vector<uint8_t> encode_png_gray1(const std::vector<uint8_t>& bits, int64_t width_px,
                                      int64_t height_px);
// A palette PNG: indices into palette (RGB triples).
std::vector<uint8_t> encode_png_palette(const std::vector<uint8_t>& indices,
                                        const std::vector<uint8_t>& palette, int64_t width_px,
                                        int64_t height_px);
// JPEG at the given quality; channels 1 (gray) or 3 (RGB).
std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& samples, int64_t width_px,
                                 int64_t height_px, int channels, int quality);

std::string base64(const std::vector<uint8_t>& bytes);
std::string data_url(const std::string& media_type, const std::vector<uint8_t>& bytes);

}  // namespace ib::test
