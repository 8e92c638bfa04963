// Qwen2-VL's vision side for serve and run (model_vision.h): dynamic resolution (each image
// smart-resized and cut into patches, grid_t grid_h grid_w / merge^2 visual tokens), the images
// in <|vision_start|> <|image_pad|>... <|vision_end|> as the chat template writes them, and the
// prompt's M-RoPE positions (prepare_qwen2vl_request).
#include <array>
#include <memory>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "cli/detail/model_vision_parts.h"
#include "vision/qwen2vl_encoder.h"

namespace ib::detail {
namespace {

// Each image pad wrapped in <|vision_start|> ... <|vision_end|>, where the prompt does not
// already hold them around it (a chat part's placeholder is the pad alone).
std::vector<int32_t> wrap_image_pads(std::span<const int32_t> tokens, const Qwen2VlConfig& c) {
  const auto pad = static_cast<int32_t>(c.image_token_id);
  const auto start = static_cast<int32_t>(c.vision_start_token_id);
  const auto end = static_cast<int32_t>(c.vision_end_token_id);
  std::vector<int32_t> out;
  out.reserve(tokens.size() + 2);
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] != pad) {
      out.push_back(tokens[i]);
      continue;
    }
    if (i == 0 || tokens[i - 1] != start) out.push_back(start);
    out.push_back(pad);
    if (i + 1 == tokens.size() || tokens[i + 1] != end) out.push_back(end);
  }
  return out;
}

// Each image Qwen2VLImageProcessor-preprocessed (transformers' torchvision backend), its pad
// expanded to its visual tokens, the positions from get_rope_index.
class Qwen2VlImagePrompter final : public ImagePrompter {
 public:
  Qwen2VlImagePrompter(Qwen2VlModelFiles files, ImageInputPolicy policy)
      : files_(std::move(files)), policy_(std::move(policy)) {}

  int32_t image_token_id() const override {
    return static_cast<int32_t>(files_.config.image_token_id);
  }

  std::variant<PromptWithImages, ApiError> place(
      const std::vector<int32_t>& token_ids, const std::vector<ChatImage>& parts) const override {
    PromptImageReader reader(policy_);
    std::vector<Qwen2VlPixels> pixels;
    for (const ChatImage& part : parts) {
      auto image = reader.read_image_url(part.url, part.param);
      if (!image.ok()) return bad_field(part.param, image.error().message);
      auto p = preprocess_qwen2vl(*image, files_.preprocess, ImageBackend::kTorchvision);
      if (!p.ok()) {
        return bad_field(part.param,
                         fmt::format("{} (image_url): {}", part.param, p.error().message));
      }
      pixels.push_back(std::move(*p));
    }
    GenerationRequest request;
    request.prompt_tokens = wrap_image_pads(token_ids, files_.config);
    const Status prepared = prepare_qwen2vl_request(files_.config, std::move(pixels), request);
    if (!prepared.ok()) return bad_field("messages", prepared.error().message);
    return PromptWithImages{std::move(request.prompt_tokens), std::move(request.images),
                            std::move(request.mrope_positions)};
  }

 private:
  Qwen2VlModelFiles files_;
  ImageInputPolicy policy_;
};

// Per request: per image <|vision_start|>, its visual tokens and <|vision_end|>, then the
// prompt's tokens; its images' pixel values and grids, and the prompt's M-RoPE positions.
Status prepare_qwen2vl_requests(const Qwen2VlModelFiles& files,
                                std::vector<RequestSpec>& requests) {
  const Qwen2VlConfig& c = files.config;
  const auto pad = static_cast<int32_t>(c.image_token_id);
  const auto start = static_cast<int32_t>(c.vision_start_token_id);
  const auto end = static_cast<int32_t>(c.vision_end_token_id);
  const std::array<int32_t, 4> reserved = {pad, start, end, static_cast<int32_t>(c.video_token_id)};
  for (RequestSpec& r : requests) {
    if (r.images.empty()) continue;
    GenerationRequest g;
    std::vector<Qwen2VlPixels> pixels;
    for (const RequestImage& spec : r.images) {
      auto image = request_image(spec, ImageLimits{});
      if (!image.ok()) {
        return user_error(fmt::format("request {}: {}", r.id, image.error().message));
      }
      auto p = preprocess_qwen2vl(*image, files.preprocess, ImageBackend::kTorchvision);
      if (!p.ok()) {
        return user_error(
            fmt::format("request {}: {}: {}", r.id, describe_image(spec), p.error().message));
      }
      pixels.push_back(std::move(*p));
      g.prompt_tokens.insert(g.prompt_tokens.end(), {start, pad, end});
    }
    for (const int32_t t : r.prompt_tokens)
      g.prompt_tokens.push_back(unreserved_token(t, reserved));
    const Status prepared = prepare_qwen2vl_request(c, std::move(pixels), g);
    if (!prepared.ok()) {
      return user_error(fmt::format("request {}: {}", r.id, prepared.error().message));
    }
    auto images = std::make_shared<std::vector<PreparedImage>>();
    for (ImageInput& in : g.images) {
      images->push_back(
          PreparedImage{in.start_pos, std::move(in.pixel_values), std::move(in.grid_thw)});
    }
    r.prompt_tokens = std::move(g.prompt_tokens);
    r.input_len = static_cast<int>(r.prompt_tokens.size());
    r.prepared_images = std::move(images);
    r.mrope_positions = std::make_shared<const std::vector<int32_t>>(std::move(g.mrope_positions));
  }
  return Ok{};
}

}  // namespace

Result<ModelVision> qwen2vl_vision(const std::string& dir, ImageInputPolicy policy) {
  IB_ASSIGN_OR_RETURN(Qwen2VlModelFiles files, read_qwen2vl_files(dir));
  ModelVision vision;
  const Qwen2VlConfig config = files.config;
  vision.encoder = [dir, config](Backend& backend) -> Result<std::unique_ptr<VisionEncoder>> {
    IB_ASSIGN_OR_RETURN(auto encoder, load_qwen2vl_encoder(dir, config, backend));
    return std::unique_ptr<VisionEncoder>(std::move(encoder));
  };
  vision.prepare_requests = [files](std::vector<RequestSpec>& requests) {
    return prepare_qwen2vl_requests(files, requests);
  };
  vision.prompter = std::make_shared<Qwen2VlImagePrompter>(std::move(files), std::move(policy));
  return vision;
}

}  // namespace ib::detail
