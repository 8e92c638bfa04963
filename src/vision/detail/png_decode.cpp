// PNG through libpng's progressive-free reader, from memory, with its errors as Results
// (setjmp/longjmp: no C++ object is created between the setjmp and any libpng call).
#include <png.h>

#include <cstdio>
#include <cstring>
#include <string>

#include "vision/detail/decoders.h"

namespace ib::detail {

namespace {

// Everything the libpng callbacks and the error path reach lives here, in memory, so a longjmp
// leaves it intact.
struct PngState {
  std::span<const uint8_t> bytes;
  size_t offset = 0;
  char message[256] = {};
  Image image;
  std::vector<png_bytep> rows;
};

void read_from_memory(png_structp png, png_bytep out, size_t count) {
  auto* state = static_cast<PngState*>(png_get_io_ptr(png));
  if (count > state->bytes.size() - state->offset) png_error(png, "the data is truncated");
  std::memcpy(out, state->bytes.data() + state->offset, count);
  state->offset += count;
}

[[noreturn]] void on_error(png_structp png, png_const_charp message) {
  auto* state = static_cast<PngState*>(png_get_error_ptr(png));
  std::snprintf(state->message, sizeof state->message, "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp /*png*/, png_const_charp /*message*/) {}

// Sets libpng's transformations to 8-bit RGB, as PIL's convert("RGB") reads the file.
void request_rgb8(png_structp png, png_infop info) {
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  if (bit_depth == 16) png_set_strip_16(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) {
    png_set_gray_to_rgb(png);
  }
  if ((color_type & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
}

}  // namespace

Result<Image> decode_png(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  PngState state;
  state.bytes = bytes;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &state, on_error, on_warning);
  if (png == nullptr) return runtime_error("PNG: libpng could not start (out of memory)");
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return runtime_error("PNG: libpng could not start (out of memory)");
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return user_error(std::string("PNG: ") + state.message + "; send a valid PNG or JPEG image");
  }
  png_set_read_fn(png, &state, read_from_memory);
  png_read_info(png, info);
  const int64_t width_px = png_get_image_width(png, info);
  const int64_t height_px = png_get_image_height(png, info);
  if (width_px * height_px > limits.max_pixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return too_many_pixels(width_px, height_px, limits);
  }
  request_rgb8(png, info);
  IB_ASSERT(png_get_rowbytes(png, info) == static_cast<size_t>(width_px) * 3,
            "libpng's rows are not 8-bit RGB");
  state.image.width_px = width_px;
  state.image.height_px = height_px;
  state.image.rgb.resize(static_cast<size_t>(width_px * height_px * 3));
  state.rows.resize(static_cast<size_t>(height_px));
  for (int64_t y = 0; y < height_px; ++y) {
    state.rows[static_cast<size_t>(y)] = state.image.rgb.data() + y * width_px * 3;
  }
  png_read_image(png, state.rows.data());
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return std::move(state.image);
}

}  // namespace ib::detail
