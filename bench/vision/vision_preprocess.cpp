// vision_preprocess IMAGE PREPROCESSOR_CONFIG BACKEND OUT: writes the pixel values of one image
// file (PNG or JPEG), float32 little-endian (3, H, W), as the CLIP preprocessing computes them
// for BACKEND (torchvision or pil); bench/gpu/vlm.sh compares them with transformers'. Exit 2 on
// a user error.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "core/fs.h"
#include "vision/clip_preprocess.h"
#include "vision/image.h"

namespace {

int fail(const ib::Error& error) {
  std::fprintf(stderr, "vision_preprocess: %s\n", error.message.c_str());
  return error.kind == ib::ErrorKind::kUser ? 2 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: vision_preprocess IMAGE PREPROCESSOR_CONFIG torchvision|pil OUT.f32\n");
    return 2;
  }
  auto bytes = ib::read_file(argv[1]);
  if (!bytes.ok()) return fail(bytes.error());
  auto config_text = ib::read_file(argv[2]);
  if (!config_text.ok()) return fail(config_text.error());
  auto config = ib::parse_clip_preprocess_config(*config_text, argv[2]);
  if (!config.ok()) return fail(config.error());
  auto backend = ib::parse_image_backend(argv[3]);
  if (!backend.ok()) return fail(backend.error());
  const std::span<const uint8_t> data(reinterpret_cast<const uint8_t*>(bytes->data()),
                                      bytes->size());
  auto image = ib::decode_image(data, ib::ImageLimits{});
  if (!image.ok()) return fail(ib::user_error(std::string(argv[1]) + ": " + image.error().message));
  const auto values = ib::preprocess_clip(*image, *config, *backend);
  std::ofstream out(argv[4], std::ios::binary);
  out.write(reinterpret_cast<const char*>(values.data()),
            static_cast<std::streamsize>(values.size() * sizeof(float)));
  if (!out) return fail(ib::runtime_error(std::string("cannot write ") + argv[4]));
  std::printf("%s: %lldx%lld -> (3, %lld, %lld) %s\n", argv[1],
              static_cast<long long>(image->width_px), static_cast<long long>(image->height_px),
              static_cast<long long>(config->do_center_crop ? config->crop_height_px : 0),
              static_cast<long long>(config->do_center_crop ? config->crop_width_px : 0), argv[3]);
  return 0;
}
