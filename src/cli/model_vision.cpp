// A model's vision side for serve and run (model_vision.h): which family, vLLM's image flags,
// and what the families share (a request's image loaded or drawn). The families' sides are in
// model_vision_llava.cpp and model_vision_qwen2vl.cpp.
#include "cli/model_vision.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <string_view>
#include <utility>

#include <fmt/format.h>

#ifdef INFERBENCH_HAVE_VISION
#include "cli/detail/model_vision_parts.h"
#include "core/fs.h"
#include "workload/workload.h"
#endif

namespace ib {
namespace {

// The vision-language architectures (config.json's) that take images, and their names in errors.
constexpr std::array<std::string_view, 2> kVisionArchitectures = {
    "LlavaForConditionalGeneration", "Qwen2VLForConditionalGeneration"};
constexpr std::string_view kVisionFamilies = "LLaVA or Qwen2-VL";

bool any_flag(const ImageFlags& flags) {
  return !flags.limit_mm_per_prompt.empty() || !flags.allowed_local_media_path.empty();
}

// A text-only model: image flags are refused, and so are workloads with images, by name.
Result<ModelVision> text_only(const ModelConfig& model, const ImageFlags& flags) {
  if (any_flag(flags)) {
    return user_error(fmt::format(
        "--limit-mm-per-prompt and --allowed-local-media-path apply to vision-language models "
        "({}); model '{}' takes text only",
        kVisionFamilies, model.name));
  }
  ModelVision none;
  none.prepare_requests = [name = model.name](std::vector<RequestSpec>& requests) -> Status {
    for (const RequestSpec& r : requests) {
      if (!r.images.empty()) {
        return user_error(fmt::format(
            "request {} holds images and model '{}' takes text only (it has no vision tower); "
            "run image workloads on a vision-language model ({})",
            r.id, name, kVisionFamilies));
      }
    }
    return Ok{};
  };
  return none;
}

}  // namespace

#ifdef INFERBENCH_HAVE_VISION
namespace detail {

Result<Image> request_image(const RequestImage& spec, const ImageLimits& limits) {
  if (spec.path.empty()) return random_rgb_image(spec.width_px, spec.height_px, spec.seed);
  IB_ASSIGN_OR_RETURN(const std::string bytes, read_file(spec.path));
  auto image =
      decode_image(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), limits);
  if (!image.ok()) return user_error("image " + spec.path + ": " + image.error().message);
  return image;
}

std::string describe_image(const RequestImage& spec) {
  if (!spec.path.empty()) return "image " + spec.path;
  return fmt::format("a random {} x {} px image (--random-mm-bucket-config)", spec.width_px,
                     spec.height_px);
}

int32_t unreserved_token(int32_t token, std::span<const int32_t> reserved) {
  auto taken = [&](int32_t id) {
    return std::find(reserved.begin(), reserved.end(), id) != reserved.end();
  };
  for (int32_t id = token; id >= 0; --id) {
    if (!taken(id)) return id;
  }
  int32_t id = token + 1;
  while (taken(id)) ++id;
  return id;
}

}  // namespace detail
#endif

Result<ModelVision> model_vision(const ModelConfig& model, const std::string& path,
                                 const ImageFlags& flags) {
  const auto* arch =
      std::find(kVisionArchitectures.begin(), kVisionArchitectures.end(), model.hf_architecture);
  if (arch == kVisionArchitectures.end()) return text_only(model, flags);
#ifdef INFERBENCH_HAVE_VISION
  ImageInputPolicy policy;
  if (!flags.limit_mm_per_prompt.empty()) {
    IB_ASSIGN_OR_RETURN(
        policy.max_images_per_prompt,
        parse_limit_mm_per_prompt(flags.limit_mm_per_prompt, "--limit-mm-per-prompt"));
  }
  policy.allowed_local_media_path = flags.allowed_local_media_path;
  if (!policy.allowed_local_media_path.empty() &&
      !std::filesystem::is_directory(policy.allowed_local_media_path)) {
    return user_error(fmt::format("--allowed-local-media-path {}: not a directory",
                                  policy.allowed_local_media_path));
  }
  if (path.empty()) {
    return user_error(fmt::format(
        "model '{}' is a vision-language model; give its checkpoint directory as --model (the "
        "vision tower's weights are read from it)",
        model.name));
  }
  if (*arch == "LlavaForConditionalGeneration")
    return detail::llava_vision(path, std::move(policy));
  return detail::qwen2vl_vision(path, std::move(policy));
#else
  static_cast<void>(path);
  return user_error(fmt::format(
      "model '{}' is a vision-language model ({}) and this inferbench was built without image "
      "support; rebuild with -DINFERBENCH_VISION=ON (libpng and libjpeg-turbo: "
      "scripts/install-deps)",
      model.name, *arch));
#endif
}

}  // namespace ib
