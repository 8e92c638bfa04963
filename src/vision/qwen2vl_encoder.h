// Qwen2-VL in the engine: the vision tower (qwen2vl_vision_tower.h) as the engine's
// VisionEncoder, sizing each image by its grid; what a Qwen2VLForConditionalGeneration
// checkpoint directory holds for it (config.json's vision half, preprocessor_config.json, the
// vision tensors); and a request's prompt made ready (placeholders expanded, M-RoPE positions).
// The language model loads through the engine's qwen2_vl architecture.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "vision/qwen2vl_preprocess.h"
#include "vision/qwen2vl_vision_tower.h"

namespace ib {

// Whether a model's config is a Qwen2-VL checkpoint's (its images need a Qwen2VlVisionEncoder).
bool is_qwen2vl(const ModelConfig& model);

// The vision tower of a Qwen2-VL checkpoint, on a backend: encodes images of any grid.
class Qwen2VlVisionEncoder final : public VisionEncoder {
 public:
  Qwen2VlVisionEncoder(Backend& backend, Qwen2VlConfig config, Qwen2VlVisionWeights weights)
      : backend_(backend), config_(config), weights_(std::move(weights)), scratch_(backend) {}
  // Dynamic resolution: no fixed counts (0).
  int64_t tokens_per_image() const override { return 0; }
  int64_t pixel_values_per_image() const override { return 0; }
  int32_t image_token_id() const override { return static_cast<int32_t>(config_.image_token_id); }
  // grid_thw / merge^2 tokens; the grid must be (t, h, w) positive with h and w multiples of the
  // merge size.
  Result<int64_t> image_tokens(const ImageInput& image) const override;
  int64_t pixel_values(const ImageInput& image) const override;
  Status encode_images(std::span<const ImageInput* const> images, Tensor out) override;
  const Qwen2VlConfig& config() const { return config_; }
  int64_t weight_bytes() const { return weights_.bytes; }

 private:
  Backend& backend_;
  Qwen2VlConfig config_;
  Qwen2VlVisionWeights weights_;
  VisionScratch scratch_;  // kept between batches, grown to the largest
};

struct Qwen2VlModelFiles {
  Qwen2VlConfig config;
  Qwen2VlPreprocessConfig preprocess;
};
// config.json and preprocessor_config.json of a Qwen2-VL checkpoint directory; the preprocessor
// must cut the tower's patches.
Result<Qwen2VlModelFiles> read_qwen2vl_files(const std::string& dir);

// The encoder from a checkpoint directory's vision tensors, on a backend with vision ops
// (create_engine refuses a Qwen2-VL model on one without).
Result<std::unique_ptr<Qwen2VlVisionEncoder>> load_qwen2vl_encoder(const std::string& dir,
                                                                   const Qwen2VlConfig& config,
                                                                   Backend& backend);

// Makes request ready for the engine: its prompt_tokens hold one <|image_pad|> per image (in
// <|vision_start|> ... <|vision_end|>, as the chat template writes them), images their pixel
// values in prompt order. Each placeholder is expanded to its image's visual tokens, the images
// placed on them (start_pos, pixel values, grid) and mrope_positions set (get_rope_index).
Status prepare_qwen2vl_request(const Qwen2VlConfig& config, std::vector<Qwen2VlPixels> images,
                               GenerationRequest& request);

}  // namespace ib
