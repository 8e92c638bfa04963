// Test helpers: in-memory PNG and JPEG encoders (libpng, libjpeg) and base64.
// jpeglib.h needs size_t and FILE declared first.
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <jpeglib.h>
#include <png.h>

#include "vision/vision_test_support.h"

namespace ib::test {

namespace {

void append_to_vector(png_structp png, png_bytep data, size_t length) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + length);
}

void flush_nothing(png_structp /*png*/) {}

// Writes rows of row_bytes each with the given IHDR; palette may be empty.
std::vector<uint8_t> write_png(const std::vector<uint8_t>& packed, size_t row_bytes,
                               int64_t width_px, int64_t height_px, int bit_depth, int color_type,
                               const std::vector<uint8_t>& palette) {
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, append_to_vector, flush_nothing);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width_px), static_cast<png_uint_32>(height_px),
               bit_depth, color_type, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  std::vector<png_color> colors;
  for (size_t i = 0; i + 2 < palette.size(); i += 3) {
    colors.push_back(png_color{palette[i], palette[i + 1], palette[i + 2]});
  }
  if (!colors.empty()) png_set_PLTE(png, info, colors.data(), static_cast<int>(colors.size()));
  png_write_info(png, info);
  for (int64_t y = 0; y < height_px; ++y) {
    png_write_row(png, packed.data() + static_cast<size_t>(y) * row_bytes);
  }
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

}  // namespace

Image pattern_image(int64_t width_px, int64_t height_px, int seed, bool noisy) {
  Image image{width_px, height_px, {}};
  image.rgb.resize(static_cast<size_t>(width_px * height_px * 3));
  for (int64_t y = 0; y < height_px; ++y) {
    for (int64_t x = 0; x < width_px; ++x) {
      for (int c = 0; c < 3; ++c) {
        uint32_t v = static_cast<uint32_t>(seed + 37 * y + 11 * x + 89 * c);
        if (noisy) v = (v * 2654435761u) >> 13;
        image.rgb[static_cast<size_t>((y * width_px + x) * 3 + c)] = static_cast<uint8_t>(v);
      }
    }
  }
  return image;
}

std::vector<uint8_t> encode_png(const std::vector<uint8_t>& samples, int64_t width_px,
                                int64_t height_px, int channels, int bit_depth) {
  static constexpr int kTypes[] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA,
                                   PNG_COLOR_TYPE_RGB, PNG_COLOR_TYPE_RGB_ALPHA};
  std::vector<uint8_t> packed;
  for (uint8_t v : samples) {
    packed.push_back(v);
    if (bit_depth == 16) packed.push_back(static_cast<uint8_t>(255 - v));
  }
  const size_t row_bytes = static_cast<size_t>(width_px * channels * (bit_depth / 8));
  return write_png(packed, row_bytes, width_px, height_px, bit_depth, kTypes[channels], {});
}

std::vector<uint8_t> encode_png_gray1(const std::vector<uint8_t>& bits, int64_t width_px,
                                      int64_t height_px) {
  const size_t row_bytes = static_cast<size_t>((width_px + 7) / 8);
  std::vector<uint8_t> packed(row_bytes * static_cast<size_t>(height_px), 0);
  for (int64_t y = 0; y < height_px; ++y) {
    for (int64_t x = 0; x < width_px; ++x) {
      if (bits[static_cast<size_t>(y * width_px + x)] != 0) {
        packed[static_cast<size_t>(y) * row_bytes + static_cast<size_t>(x / 8)] |=
            static_cast<uint8_t>(0x80 >> (x % 8));
      }
    }
  }
  return write_png(packed, row_bytes, width_px, height_px, 1, PNG_COLOR_TYPE_GRAY, {});
}

std::vector<uint8_t> encode_png_palette(const std::vector<uint8_t>& indices,
                                        const std::vector<uint8_t>& palette, int64_t width_px,
                                        int64_t height_px) {
  return write_png(indices, static_cast<size_t>(width_px), width_px, height_px, 8,
                   PNG_COLOR_TYPE_PALETTE, palette);
}

std::vector<uint8_t> encode_jpeg(const std::vector<uint8_t>& samples, int64_t width_px,
                                 int64_t height_px, int channels, int quality) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = static_cast<JDIMENSION>(width_px);
  cinfo.image_height = static_cast<JDIMENSION>(height_px);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    auto* row = const_cast<JSAMPROW>(samples.data() + static_cast<size_t>(cinfo.next_scanline) *
                                                          static_cast<size_t>(width_px) *
                                                          static_cast<size_t>(channels));
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  std::vector<uint8_t> out(buffer, buffer + size);
  jpeg_destroy_compress(&cinfo);
  free(buffer);
  return out;
}

std::string base64(const std::vector<uint8_t>& bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const uint32_t b0 = bytes[i];
    const uint32_t b1 = i + 1 < bytes.size() ? bytes[i + 1] : 0;
    const uint32_t b2 = i + 2 < bytes.size() ? bytes[i + 2] : 0;
    const uint32_t group = b0 << 16 | b1 << 8 | b2;
    out += kAlphabet[group >> 18 & 63];
    out += kAlphabet[group >> 12 & 63];
    out += i + 1 < bytes.size() ? kAlphabet[group >> 6 & 63] : '=';
    out += i + 2 < bytes.size() ? kAlphabet[group & 63] : '=';
  }
  return out;
}

std::string data_url(const std::string& media_type, const std::vector<uint8_t>& bytes) {
  return "data:" + media_type + ";base64," + base64(bytes);
}

}  // namespace ib::test
