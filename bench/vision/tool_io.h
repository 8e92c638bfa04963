// What the vision tools share: an error's exit status (2 for a user error), an image file read
// and decoded, float32 little-endian output files.
#pragma once

#include <cstdio>
#include <fstream>
#include <span>
#include <string>

#include "core/fs.h"
#include "core/result.h"
#include "vision/image.h"

namespace ib::vision_tool {

inline int fail(const char* tool, const Error& error) {
  std::fprintf(stderr, "%s: %s\n", tool, error.message.c_str());
  return error.kind == ErrorKind::kUser ? 2 : 1;
}

inline Status write_floats(const std::string& path, const float* data, size_t count) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * 4));
  if (!out) return runtime_error("cannot write " + path);
  return Ok{};
}

// A PNG or JPEG file decoded (default limits); errors name the file.
inline Result<Image> read_image(const std::string& path) {
  auto bytes = read_file(path);
  if (!bytes.ok()) return bytes.error();
  auto image = decode_image(
      std::span(reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()), ImageLimits{});
  if (!image.ok()) return user_error(path + ": " + image.error().message);
  return image;
}

}  // namespace ib::vision_tool
