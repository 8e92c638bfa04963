// LLaVA's vision side for serve and run (model_vision.h): CLIP preprocessing and a fixed count of
// visual tokens an image.
#include <array>
#include <memory>
#include <utility>

#include <fmt/format.h>

#include "cli/detail/model_vision_parts.h"
#include "vision/image_tokens.h"
#include "vision/llava_encoder.h"

namespace ib::detail {
namespace {

// Each image CLIP-preprocessed as its preprocessor_config.json says (transformers' torchvision
// backend), its image token expanded to tokens_per_image visual tokens.
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

// Per request, its images' pixel values, then tokens_per_image image tokens per image followed
// by the prompt's tokens.
Status prepare_llava_requests(const LlavaModelFiles& files, std::vector<RequestSpec>& requests) {
  const int64_t per_image = files.config.tokens_per_image();
  const auto image_token = static_cast<int32_t>(files.config.image_token_id);
  const std::array<int32_t, 1> reserved = {image_token};
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
    for (const int32_t t : r.prompt_tokens) tokens.push_back(unreserved_token(t, reserved));
    r.prompt_tokens = std::move(tokens);
    r.input_len = static_cast<int>(r.prompt_tokens.size());
    r.prepared_images = std::move(prepared);
  }
  return Ok{};
}

}  // namespace

Result<ModelVision> llava_vision(const std::string& dir, ImageInputPolicy policy) {
  IB_ASSIGN_OR_RETURN(LlavaModelFiles files, read_llava_files(dir));
  ModelVision vision;
  const LlavaConfig config = files.config;
  vision.encoder = [dir, config](Backend& backend) -> Result<std::unique_ptr<VisionEncoder>> {
    IB_ASSIGN_OR_RETURN(auto encoder, load_llava_encoder(dir, config, backend));
    return std::unique_ptr<VisionEncoder>(std::move(encoder));
  };
  vision.prepare_requests = [files](std::vector<RequestSpec>& requests) {
    return prepare_llava_requests(files, requests);
  };
  vision.prompter = std::make_shared<LlavaImagePrompter>(std::move(files), std::move(policy));
  return vision;
}

}  // namespace ib::detail
