// vision_preprocess IMAGE PREPROCESSOR_CONFIG BACKEND OUT: writes the pixel values of one image
// file (PNG or JPEG), float32 little-endian (3, H, W), as the CLIP preprocessing computes them
// for BACKEND (torchvision or pil); bench/gpu/vlm.sh compares them with transformers'. Exit 2 on
// a user error.
#include <cstdio>
#include <string>

#include "tool_io.h"
#include "vision/clip_preprocess.h"

namespace {

int fail(const ib::Error& error) {
  return ib::vision_tool::fail("vision_preprocess", error);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr,
                 "usage: vision_preprocess IMAGE PREPROCESSOR_CONFIG torchvision|pil OUT.f32\n");
    return 2;
  }
  auto config_text = ib::read_file(argv[2]);
  if (!config_text.ok()) return fail(config_text.error());
  auto config = ib::parse_clip_preprocess_config(*config_text, argv[2]);
  if (!config.ok()) return fail(config.error());
  auto backend = ib::parse_image_backend(argv[3]);
  if (!backend.ok()) return fail(backend.error());
  auto image = ib::vision_tool::read_image(argv[1]);
  if (!image.ok()) return fail(image.error());
  const auto values = ib::preprocess_clip(*image, *config, *backend);
  const ib::Status written = ib::vision_tool::write_floats(argv[4], values.data(), values.size());
  if (!written.ok()) return fail(written.error());
  std::printf("%s: %lldx%lld -> (3, %lld, %lld) %s\n", argv[1],
              static_cast<long long>(image->width_px), static_cast<long long>(image->height_px),
              static_cast<long long>(config->do_center_crop ? config->crop_height_px : 0),
              static_cast<long long>(config->do_center_crop ? config->crop_width_px : 0), argv[3]);
  return 0;
}
