// Encoders for images a client sends (the openai-chat target's image_url data: URLs): 8-bit RGB
// as PNG (libpng) and bytes as base64, the inverses of png_decode.cpp and base64.h.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "vision/image.h"

namespace ib::detail {

// image as an 8-bit RGB PNG, not interlaced, unfiltered at zlib's fastest level (the images sent
// are mostly random noise, which no filter or level compresses). decode_image gives back its
// pixels exactly. Errors are libpng's (out of memory, a size PNG cannot hold).
Result<std::vector<uint8_t>> encode_png(const Image& image);

// RFC 4648's standard alphabet with '=' padding: what decode_base64 accepts.
std::string encode_base64(std::span<const uint8_t> bytes);

}  // namespace ib::detail
