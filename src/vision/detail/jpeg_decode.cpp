// JPEG through libjpeg-turbo, from memory, with its errors as Results (setjmp/longjmp: no C++
// object is created between the setjmp and any libjpeg call). A corrupt-data warning, which
// libjpeg would decode past with gray fill, is refused like an error (PIL refuses a truncated
// file too).
// jpeglib.h needs size_t and FILE declared first.
#include <csetjmp>
#include <cstddef>
#include <cstdio>

#include <jpeglib.h>

#include <string>

#include "vision/detail/decoders.h"

namespace ib::detail {

namespace {

// Everything the libjpeg callbacks and the error path reach lives here, in memory, so a longjmp
// leaves it intact. mgr is the first member: libjpeg hands the callbacks a pointer to it.
struct JpegState {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX] = {};
  bool corrupt = false;
  Image image;
};

[[noreturn]] void on_error(j_common_ptr cinfo) {
  auto* state = reinterpret_cast<JpegState*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, state->message);
  std::longjmp(state->jump, 1);
}

// level -1: a warning (corrupt data); keep the first one.
void on_message(j_common_ptr cinfo, int level) {
  auto* state = reinterpret_cast<JpegState*>(cinfo->err);
  if (level >= 0 || state->corrupt) return;
  state->corrupt = true;
  (*cinfo->err->format_message)(cinfo, state->message);
}

Error corrupt_jpeg(const char* message) {
  return user_error(std::string("JPEG: ") + message + "; send a valid PNG or JPEG image");
}

}  // namespace

Result<Image> decode_jpeg(std::span<const uint8_t> bytes, const ImageLimits& limits) {
  JpegState state;
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&state.mgr);
  state.mgr.error_exit = on_error;
  state.mgr.emit_message = on_message;
  if (setjmp(state.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return corrupt_jpeg(state.message);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, bytes.data(), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&cinfo, TRUE);
  const int64_t width_px = cinfo.image_width;
  const int64_t height_px = cinfo.image_height;
  if (width_px * height_px > limits.max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return too_many_pixels(width_px, height_px, limits);
  }
  if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
    jpeg_destroy_decompress(&cinfo);
    return user_error("JPEG: CMYK images are not supported; send an RGB or grayscale image");
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  IB_ASSERT(cinfo.output_components == 3, "libjpeg's output is not RGB");
  state.image.width_px = cinfo.output_width;
  state.image.height_px = cinfo.output_height;
  state.image.rgb.resize(static_cast<size_t>(state.image.width_px * state.image.height_px * 3));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = state.image.rgb.data() +
                   static_cast<size_t>(cinfo.output_scanline) * cinfo.output_width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (state.corrupt) return corrupt_jpeg(state.message);
  return std::move(state.image);
}

}  // namespace ib::detail
