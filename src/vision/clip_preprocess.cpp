// CLIP image preprocessing: resize, center crop, rescale and normalise.
#include "vision/clip_preprocess.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>
#include <string>

#include "vision/detail/bicubic_resize.h"
#include "vision/detail/config_fields.h"

namespace ib {

using detail::flag;

namespace {

constexpr int kBicubic = 3;  // PIL.Image.Resampling.BICUBIC

Image center_crop(const Image& in, int64_t height_px, int64_t width_px) {
  IB_ASSERT(height_px <= in.height_px && width_px <= in.width_px, "crop larger than the image");
  // (orig - crop) // 2 in both backends: transformers 5.17's torchvision path matched it on the
  // H200 where rounding half to even (torchvision's own center_crop) was a pixel off
  // (bench/results/h200/vlm/: the 1,003 x 336 and 1,024 x 683 images).
  auto margin = [](int64_t extra) { return extra / 2; };
  const int64_t top = margin(in.height_px - height_px);
  const int64_t left = margin(in.width_px - width_px);
  Image out{width_px, height_px, {}};
  out.rgb.resize(static_cast<size_t>(width_px * height_px * 3));
  for (int64_t y = 0; y < height_px; ++y) {
    const auto* src = in.rgb.data() + ((top + y) * in.width_px + left) * 3;
    std::copy(src, src + width_px * 3, out.rgb.data() + y * width_px * 3);
  }
  return out;
}

Result<int64_t> size_field(const nlohmann::json& j, const char* key, const std::string& where) {
  if (!j.is_number_integer() || j.get<int64_t>() <= 0 || j.get<int64_t>() > 8192) {
    return user_error(where + ": \"" + key + "\" must be an integer in 1..8192");
  }
  return j.get<int64_t>();
}

}  // namespace

Result<ImageBackend> parse_image_backend(std::string_view name) {
  if (name == "torchvision") return ImageBackend::kTorchvision;
  if (name == "pil") return ImageBackend::kPil;
  return user_error("image backend \"" + std::string(name) +
                    "\" is unknown; use torchvision or pil");
}

std::array<int64_t, 2> clip_resized_size(int64_t width_px, int64_t height_px,
                                         int64_t shortest_edge_px) {
  const int64_t short_side = std::min(width_px, height_px);
  const int64_t long_side = std::max(width_px, height_px);
  const auto new_long = static_cast<int64_t>(static_cast<double>(shortest_edge_px * long_side) /
                                             static_cast<double>(short_side));
  if (width_px <= height_px) return {shortest_edge_px, new_long};
  return {new_long, shortest_edge_px};
}

Result<ClipPreprocessConfig> parse_clip_preprocess_config(std::string_view json,
                                                          std::string_view origin) {
  const std::string where(origin);
  const auto root = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return user_error(where + " is not a JSON object; pass the model's preprocessor_config.json");
  }
  ClipPreprocessConfig config;
  if (root.contains("resample") && root["resample"] != kBicubic) {
    return user_error(where + ": resample " + root["resample"].dump() +
                      " is not supported (bicubic, 3, only)");
  }
  auto do_resize = flag(root, "do_resize", true, where);
  auto do_crop = flag(root, "do_center_crop", true, where);
  for (const auto* f : {&do_resize, &do_crop}) {
    if (!f->ok()) return f->error();
  }
  config.do_resize = *do_resize;
  config.do_center_crop = *do_crop;
  if (root.contains("size")) {
    const auto& size = root["size"];
    const nlohmann::json* edge = size.is_object() && size.contains("shortest_edge")
                                     ? &size["shortest_edge"]
                                     : (size.is_number() ? &size : nullptr);
    if (edge == nullptr) {
      return user_error(where + ": \"size\" must be {\"shortest_edge\": N} (a CLIP processor)");
    }
    auto n = size_field(*edge, "size.shortest_edge", where);
    if (!n.ok()) return n.error();
    config.shortest_edge_px = *n;
  }
  if (root.contains("crop_size")) {
    const auto& crop = root["crop_size"];
    if (crop.is_object()) {
      auto h = size_field(crop.value("height", nlohmann::json()), "crop_size.height", where);
      auto w = size_field(crop.value("width", nlohmann::json()), "crop_size.width", where);
      if (!h.ok()) return h.error();
      if (!w.ok()) return w.error();
      config.crop_height_px = *h;
      config.crop_width_px = *w;
    } else {
      auto n = size_field(crop, "crop_size", where);
      if (!n.ok()) return n.error();
      config.crop_height_px = config.crop_width_px = *n;
    }
  }
  if (config.do_resize && config.do_center_crop &&
      (config.crop_height_px > config.shortest_edge_px ||
       config.crop_width_px > config.shortest_edge_px)) {
    return user_error(where +
                      ": the crop is larger than size.shortest_edge (padding is not "
                      "supported)");
  }
  IB_TRY(detail::read_normalization(root, where, config));
  return config;
}

std::vector<float> preprocess_clip(const Image& image, const ClipPreprocessConfig& config,
                                   ImageBackend backend) {
  Image work = image;
  if (config.do_resize) {
    const auto [w, h] = clip_resized_size(image.width_px, image.height_px, config.shortest_edge_px);
    const auto rule = backend == ImageBackend::kPil ? detail::FixedPointRule::kPil
                                                    : detail::FixedPointRule::kTorchvision;
    work = detail::resize_bicubic(work, w, h, rule);
  }
  if (config.do_center_crop) {
    IB_ASSERT(config.crop_height_px <= work.height_px && config.crop_width_px <= work.width_px,
              "crop larger than the image (refused at parse when resizing)");
    work = center_crop(work, config.crop_height_px, config.crop_width_px);
  }
  const int64_t plane = work.width_px * work.height_px;
  std::vector<float> out(static_cast<size_t>(3 * plane));  // (3, H, W)
  for (int c = 0; c < 3; ++c) {
    // Each backend's arithmetic: PIL's numpy rescales in float64 and normalises in float32;
    // torchvision folds the rescale into mean and std (mean / factor, std / factor) in float32.
    const auto mean = static_cast<float>(config.image_mean[static_cast<size_t>(c)]);
    const auto std_dev = static_cast<float>(config.image_std[static_cast<size_t>(c)]);
    const auto inv_factor = static_cast<float>(1.0 / config.rescale_factor);
    for (int64_t i = 0; i < plane; ++i) {
      const uint8_t u = work.rgb[static_cast<size_t>(i * 3 + c)];
      float v = static_cast<float>(u);
      if (backend == ImageBackend::kPil) {
        if (config.do_rescale)
          v = static_cast<float>(static_cast<double>(u) * config.rescale_factor);
        if (config.do_normalize) v = (v - mean) / std_dev;
      } else if (config.do_normalize) {
        const float m = config.do_rescale ? mean * inv_factor : mean;
        const float s = config.do_rescale ? std_dev * inv_factor : std_dev;
        v = (v - m) / s;
      } else if (config.do_rescale) {
        v = static_cast<float>(static_cast<double>(v) * config.rescale_factor);
      }
      out[static_cast<size_t>(c * plane + i)] = v;
    }
  }
  return out;
}

}  // namespace ib
