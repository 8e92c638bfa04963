// A model's vision side for serve (model_vision.h): LLaVA's preprocessing and visual tokens.
#include "cli/model_vision.h"

#include <filesystem>
#include <utility>

#include <fmt/format.h>

#ifdef INFERBENCH_HAVE_VISION
#include "core/fs.h"
#include "core/rng.h"
#include "vision/image_input.h"
#include "vision/image_tokens.h"
#include "vision/llava_encoder.h"
#include "workload/workload.h"
#endif

namespace ib {
namespace {

bool any_flag(const ImageFlags& flags) {
  return !flags.limit_mm_per_prompt.empty() || !flags.allowed_local_media_path.empty();
}

#ifdef INFERBENCH_HAVE_VISION

// LLaVA: each image CLIP-preprocessed as its preprocessor_config.json says (transformers'
// torchvision backend), its image token expanded to tokens_per_image visual tokens.
class LlavaImagePrompter final : public ImagePrompter {
 public:
  LlavaImagePrompter(LlavaModelFiles files, ImageInputPolicy policy)
      : files_(std::move(files)), policy_(std::move(policy)) {}

  int32_t image_token_id() const override {
    return static_cast<int32_t>(files_.config.image_token_id);
  }

  std::variant<PromptWithImages, ApiError> place(
      const std::vector<int32_t>& token_ids, const std::vector<ChatImage>& parts) const override {
    PromptImageReader reader(policy_);
    PromptWithImages out;
    for (const ChatImage& part : parts) {
      auto image = reader.read_image_url(part.url, part.param);
      if (!image.ok()) return bad_field(part.param, image.error().message);
      ImageInput input;
      input.pixel_values = preprocess_clip(*image, files_.preprocess, ImageBackend::kTorchvision);
      out.images.push_back(std::move(input));
    }
    auto expanded =
        expand_image_tokens(token_ids, image_token_id(), files_.config.tokens_per_image(),
                            static_cast<int64_t>(parts.size()));
    if (!expanded.ok()) return bad_field("messages", expanded.error().message);
    for (size_t i = 0; i < out.images.size(); ++i) {
      out.images[i].start_pos = static_cast<int>(expanded->image_start[i]);
    }
    out.token_ids = std::move(expanded->token_ids);
    return out;
  }

 private:
  LlavaModelFiles files_;
  ImageInputPolicy policy_;
};

// A request's image as RGB: its file decoded, or random bytes of its size from its seed.
Result<Image> request_image(const RequestImage& spec, const ImageLimits& limits) {
  if (spec.path.empty()) {
    Image image;
    image.width_px = spec.width_px;
    image.height_px = spec.height_px;
    image.rgb.resize(static_cast<size_t>(spec.width_px * spec.height_px * 3));  // (H, W, 3)
    Rng rng(spec.seed);
    for (uint8_t& v : image.rgb) v = static_cast<uint8_t>(rng.next_u64() >> 56);
    return image;
  }
  IB_ASSIGN_OR_RETURN(const std::string bytes, read_file(spec.path));
  auto image =
      decode_image(std::span(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()), limits);
  if (!image.ok()) return user_error("image " + spec.path + ": " + image.error().message);
  return image;
}

// LLaVA's run preparation: per request, its images' pixel values, then tokens_per_image image
// tokens per image followed by the prompt's tokens. A prompt token that is the image token (a
// random prompt draws any id) becomes a neighbouring id: the engine reads every image token of a
// request with images as a visual one.
Status prepare_llava_requests(const LlavaModelFiles& files, std::vector<RequestSpec>& requests) {
  const int64_t per_image = files.config.tokens_per_image();
  const auto image_token = static_cast<int32_t>(files.config.image_token_id);
  for (RequestSpec& r : requests) {
    if (r.images.empty()) continue;
    auto prepared = std::make_shared<std::vector<PreparedImage>>();
    std::vector<int32_t> tokens;
    for (const RequestImage& spec : r.images) {
      auto image = request_image(spec, ImageLimits{});
      if (!image.ok()) {
        return user_error(fmt::format("request {}: {}", r.id, image.error().message));
      }
      PreparedImage p;
      p.start_pos = static_cast<int>(tokens.size());
      p.pixel_values = preprocess_clip(*image, files.preprocess, ImageBackend::kTorchvision);
      prepared->push_back(std::move(p));
      tokens.insert(tokens.end(), static_cast<size_t>(per_image), image_token);
    }
    for (const int32_t t : r.prompt_tokens)
      tokens.push_back(t != image_token ? t : t > 0 ? t - 1 : t + 1);
    r.prompt_tokens = std::move(tokens);
    r.input_len = static_cast<int>(r.prompt_tokens.size());
    r.prepared_images = std::move(prepared);
  }
  return Ok{};
}

#endif

}  // namespace

Result<ModelVision> model_vision(const ModelConfig& model, const std::string& path,
                                 const ImageFlags& flags) {
  const bool vision_model = model.hf_architecture == "LlavaForConditionalGeneration";
  if (!vision_model) {
    if (any_flag(flags)) {
      return user_error(fmt::format(
          "--limit-mm-per-prompt and --allowed-local-media-path apply to vision-language models "
          "(LLaVA); model '{}' takes text only",
          model.name));
    }
    ModelVision none;
    none.prepare_requests = [name = model.name](std::vector<RequestSpec>& requests) -> Status {
      for (const RequestSpec& r : requests) {
        if (!r.images.empty()) {
          return user_error(fmt::format(
              "request {} holds images and model '{}' takes text only (it has no vision "
              "tower); run image workloads on a vision-language model (LLaVA)",
              r.id, name));
        }
      }
      return Ok{};
    };
    return none;
  }
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
  IB_ASSIGN_OR_RETURN(LlavaModelFiles files, read_llava_files(path));
  ModelVision vision;
  const LlavaConfig config = files.config;
  vision.encoder = [path, config](Backend& backend) -> Result<std::unique_ptr<VisionEncoder>> {
    IB_ASSIGN_OR_RETURN(auto encoder, load_llava_encoder(path, config, backend));
    return std::unique_ptr<VisionEncoder>(std::move(encoder));
  };
  vision.prepare_requests = [files](std::vector<RequestSpec>& requests) {
    return prepare_llava_requests(files, requests);
  };
  vision.prompter = std::make_shared<LlavaImagePrompter>(std::move(files), std::move(policy));
  return vision;
#else
  static_cast<void>(path);
  return user_error(fmt::format(
      "model '{}' is a vision-language model (LLaVA) and this inferbench was built without "
      "image support; rebuild with -DINFERBENCH_VISION=ON (libpng and libjpeg-turbo: "
      "scripts/install-deps)",
      model.name));
#endif
}

}  // namespace ib
