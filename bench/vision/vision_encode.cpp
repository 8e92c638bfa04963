// vision_encode MODEL_DIR IMAGE torchvision|pil OUT_PREFIX: one image through a LLaVA checkpoint's
// vision path on the CPU backend (preprocessor_config.json, config.json, the safetensors),
// writing OUT_PREFIX.pixels.f32 (3, S, S) and OUT_PREFIX.features.f32 (tokens, text hidden),
// float32 little-endian; tools/compare_llava_vision.py compares both with transformers. Exit 2
// on a user error.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "core/fs.h"
#include "tool_io.h"
#include "vision/clip_preprocess.h"
#include "vision/clip_vision_tower.h"

namespace {

int fail(const ib::Error& error) {
  return ib::vision_tool::fail("vision_encode", error);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: vision_encode MODEL_DIR IMAGE torchvision|pil OUT_PREFIX\n");
    return 2;
  }
  const std::string dir = argv[1], prefix = argv[4];
  auto config_text = ib::read_file(dir + "/config.json");
  if (!config_text.ok()) return fail(config_text.error());
  auto config = ib::parse_llava_config(*config_text, dir + "/config.json");
  if (!config.ok()) return fail(config.error());
  auto pre_text = ib::read_file(dir + "/preprocessor_config.json");
  if (!pre_text.ok()) return fail(pre_text.error());
  auto pre = ib::parse_clip_preprocess_config(*pre_text, dir + "/preprocessor_config.json");
  if (!pre.ok()) return fail(pre.error());
  const int64_t s = config->vision.image_size_px;
  if (!pre->do_center_crop || pre->crop_height_px != s || pre->crop_width_px != s) {
    return fail(ib::user_error("the preprocessor's crop is not the vision tower's image_size " +
                               std::to_string(s)));
  }
  auto backend_kind = ib::parse_image_backend(argv[3]);
  if (!backend_kind.ok()) return fail(backend_kind.error());
  auto image = ib::vision_tool::read_image(argv[2]);
  if (!image.ok()) return fail(image.error());
  const auto pixels = ib::preprocess_clip(*image, *pre, *backend_kind);
  auto checkpoint = ib::SafetensorsCheckpoint::open(dir);
  if (!checkpoint.ok()) return fail(checkpoint.error());
  ib::CpuBackend backend(0);
  auto weights = ib::load_llava_vision_weights(backend, **checkpoint, *config);
  if (!weights.ok()) return fail(weights.error());
  const int64_t rows = config->tokens_per_image(), dt = config->text_hidden_size;
  auto out = backend.alloc(static_cast<size_t>(rows * dt) * sizeof(float), ib::MemoryTag::kOther);
  if (!out.ok()) return fail(out.error());
  const ib::Tensor features = out->view(ib::DType::kF32, {rows, dt});
  const auto start = std::chrono::steady_clock::now();
  const ib::Status status =
      ib::encode_llava_images(backend, *weights, *config, pixels, 1, features);
  if (!status.ok()) return fail(status.error());
  const auto encode_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::vector<float> host(static_cast<size_t>(rows * dt));
  backend.copy_to_host(features, host.data());
  const ib::Status written =
      ib::vision_tool::write_floats(prefix + ".pixels.f32", pixels.data(), pixels.size());
  if (!written.ok()) return fail(written.error());
  const ib::Status features_written =
      ib::vision_tool::write_floats(prefix + ".features.f32", host.data(), host.size());
  if (!features_written.ok()) return fail(features_written.error());
  std::printf("%s: %lld visual tokens x %lld, encoder %.1f ms on the CPU\n", argv[2],
              static_cast<long long>(rows), static_cast<long long>(dt), encode_ms);
  return 0;
}
