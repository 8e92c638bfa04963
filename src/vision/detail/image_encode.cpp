// PNG through libpng's writer into memory, with its errors as Results (setjmp/longjmp: no C++
// object is created between the setjmp and any libpng call), and base64.
#include "vision/detail/image_encode.h"

#include <png.h>
#include <zlib.h>

#include <cstdio>
#include <string_view>

namespace ib::detail {

namespace {

// Everything the libpng callbacks and the error path reach lives here, so a longjmp leaves it
// intact.
struct PngWriteState {
  std::vector<uint8_t> out;
  char message[256] = {};
  std::vector<png_bytep> rows;
};

void append_to_memory(png_structp png, png_bytep data, size_t count) {
  auto* state = static_cast<PngWriteState*>(png_get_io_ptr(png));
  state->out.insert(state->out.end(), data, data + count);
}

void flush_nothing(png_structp /*png*/) {}

[[noreturn]] void on_error(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngWriteState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof state->message, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp /*png*/, png_const_charp /*message*/) {}

}  // namespace

Result<std::vector<uint8_t>> encode_png(const Image& image) {
  IB_ASSERT(image.rgb.size() == static_cast<size_t>(image.width_px * image.height_px * 3),
            "an RGB image holds width x height x 3 bytes");
  if (image.width_px < 1 || image.height_px < 1 || image.width_px > PNG_UINT_31_MAX ||
      image.height_px > PNG_UINT_31_MAX) {
    return user_error("PNG: cannot encode a " + std::to_string(image.width_px) + "x" +
                      std::to_string(image.height_px) + " image; sides must be 1 to 2^31-1 px");
  }
  PngWriteState state;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &state, on_error, on_warning);
  if (png == nullptr) return runtime_error("PNG: libpng could not start (out of memory)");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_write_struct(&png, nullptr);
    return runtime_error("PNG: libpng could not start (out of memory)");
  }
  state.rows.resize(static_cast<size_t>(image.height_px));
  for (int64_t y = 0; y < image.height_px; ++y) {
    // libpng's row pointers are not const; the writer only reads them.
    state.rows[static_cast<size_t>(y)] =
        const_cast<png_bytep>(image.rgb.data() + y * image.width_px * 3);
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return runtime_error(std::string("PNG: encoding failed: ") + state.message);
  }
  png_set_write_fn(png, &state, append_to_memory, flush_nothing);
  png_set_IHDR(png, info, static_cast<png_uint_32>(image.width_px),
               static_cast<png_uint_32>(image.height_px), 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_filter(png, PNG_FILTER_TYPE_BASE, PNG_FILTER_NONE);
  png_set_compression_level(png, Z_BEST_SPEED);
  png_write_info(png, info);
  png_write_image(png, state.rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return std::move(state.out);
}

std::string encode_base64(std::span<const uint8_t> bytes) {
  constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= bytes.size(); i += 3) {
    const uint32_t group = static_cast<uint32_t>(bytes[i]) << 16 |
                           static_cast<uint32_t>(bytes[i + 1]) << 8 | bytes[i + 2];
    out.push_back(kAlphabet[group >> 18]);
    out.push_back(kAlphabet[group >> 12 & 63]);
    out.push_back(kAlphabet[group >> 6 & 63]);
    out.push_back(kAlphabet[group & 63]);
  }
  const size_t left = bytes.size() - i;  // 0, 1 or 2 bytes: "xx==" or "xxx="
  if (left > 0) {
    const uint32_t group = static_cast<uint32_t>(bytes[i]) << 16 |
                           (left == 2 ? static_cast<uint32_t>(bytes[i + 1]) << 8 : 0);
    out.push_back(kAlphabet[group >> 18]);
    out.push_back(kAlphabet[group >> 12 & 63]);
    out.push_back(left == 2 ? kAlphabet[group >> 6 & 63] : '=');
    out.push_back('=');
  }
  return out;
}

}  // namespace ib::detail
