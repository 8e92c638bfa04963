// Format sniffing and the dispatch to the PNG and JPEG decoders.
#include "vision/image.h"

#include <algorithm>
#include <array>
#include <string>

#include "core/rng.h"
#include "vision/detail/decoders.h"

namespace ib {

namespace {

bool starts_with(std::span<const uint8_t> bytes, std::span<const uint8_t> magic, size_t at = 0) {
  return bytes.size() >= at + magic.size() &&
         std::equal(magic.begin(), magic.end(), bytes.begin() + static_cast<std::ptrdiff_t>(at));
}

}  // namespace

std::string_view image_format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng:
      return "image/png";
    case ImageFormat::kJpeg:
      return "image/jpeg";
    case ImageFormat::kGif:
      return "image/gif";
    case ImageFormat::kWebp:
      return "image/webp";
    case ImageFormat::kBmp:
      return "image/bmp";
    case ImageFormat::kUnknown:
      break;
  }
  return "an unknown format";
}

ImageFormat sniff_image_format(std::span<const uint8_t> bytes) {
  static constexpr std::array<uint8_t, 8> kPng = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  static constexpr std::array<uint8_t, 3> kJpeg = {0xff, 0xd8, 0xff};
  static constexpr std::array<uint8_t, 4> kGif = {'G', 'I', 'F', '8'};
  static constexpr std::array<uint8_t, 4> kRiff = {'R', 'I', 'F', 'F'};
  static constexpr std::array<uint8_t, 4> kWebp = {'W', 'E', 'B', 'P'};
  static constexpr std::array<uint8_t, 2> kBmp = {'B', 'M'};
  if (starts_with(bytes, kPng)) return ImageFormat::kPng;
  if (starts_with(bytes, kJpeg)) return ImageFormat::kJpeg;
  if (starts_with(bytes, kGif)) return ImageFormat::kGif;
  if (starts_with(bytes, kRiff) && starts_with(bytes, kWebp, 8)) return ImageFormat::kWebp;
  if (starts_with(bytes, kBmp)) return ImageFormat::kBmp;
  return ImageFormat::kUnknown;
}

Result<Image> decode_image(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  const ImageFormat format = sniff_image_format(bytes);
  switch (format) {
    case ImageFormat::kPng:
      return detail::decode_png(bytes, limits);
    case ImageFormat::kJpeg:
      return detail::decode_jpeg(bytes, limits);
    case ImageFormat::kUnknown:
      return user_error("the bytes are not an image this build decodes (neither PNG nor JPEG" +
                        std::string(bytes.empty() ? ": empty" : "") +
                        "); send a PNG or JPEG image");
    default:
      break;
  }
  return user_error(std::string(image_format_name(format)) +
                    " is not supported; send a PNG or JPEG image");
}

namespace detail {

Error too_many_pixels(int64_t width_px, int64_t height_px, const ImageLimits& limits) {
  return user_error("the image is " + std::to_string(width_px) + "x" + std::to_string(height_px) +
                    " pixels, over the cap of " + std::to_string(limits.max_pixels) +
                    " pixels; send a smaller image");
}

}  // namespace detail
Image random_rgb_image(int64_t width_px, int64_t height_px, uint64_t seed) {
  Image image;
  image.width_px = width_px;
  image.height_px = height_px;
  image.rgb.resize(static_cast<size_t>(width_px * height_px * 3));  // (H, W, 3)
  Rng rng(seed);
  for (uint8_t& v : image.rgb) v = static_cast<uint8_t>(rng.next_u64() >> 56);
  return image;
}

}  // namespace ib
