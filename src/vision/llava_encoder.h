// LLaVA in the engine: the vision tower and projector (clip_vision_tower.h) as the engine's
// VisionEncoder, and what a LlavaForConditionalGeneration checkpoint directory holds for it
// (config.json's vision half, preprocessor_config.json, the vision tensors). The language model
// loads through the engine's llama architecture (engine/detail/language_model_view.h).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "vision/clip_preprocess.h"
#include "vision/clip_vision_tower.h"

namespace ib {

// Whether a model's config is a LLaVA checkpoint's (its images need a LlavaModel).
bool is_llava(const ModelConfig& model);

// The vision half of a LLaVA checkpoint, on a backend: encodes images for the engine.
class LlavaVisionEncoder final : public VisionEncoder {
 public:
  LlavaVisionEncoder(Backend& backend, LlavaConfig config, LlavaVisionWeights weights)
      : backend_(backend), config_(config), weights_(std::move(weights)), scratch_(backend) {}
  int64_t tokens_per_image() const override { return config_.tokens_per_image(); }
  int64_t pixel_values_per_image() const override {
    return 3 * config_.vision.image_size_px * config_.vision.image_size_px;
  }
  int32_t image_token_id() const override { return static_cast<int32_t>(config_.image_token_id); }
  // Each image's pixels uploaded into the tower's input, then the tower on the device.
  Status encode_images(std::span<const ImageInput* const> images, Tensor out) override;
  const LlavaConfig& config() const { return config_; }
  int64_t weight_bytes() const { return weights_.bytes; }

 private:
  Backend& backend_;
  LlavaConfig config_;
  LlavaVisionWeights weights_;
  VisionScratch scratch_;  // kept between batches, grown to the largest
};

struct LlavaModelFiles {
  LlavaConfig config;
  ClipPreprocessConfig preprocess;
};
// config.json and preprocessor_config.json of a LLaVA checkpoint directory; the crop must be the
// tower's image size.
Result<LlavaModelFiles> read_llava_files(const std::string& dir);

// The encoder from a checkpoint directory's vision tensors, on a backend with vision ops
// (create_engine refuses a LLaVA model on one without).
Result<std::unique_ptr<LlavaVisionEncoder>> load_llava_encoder(const std::string& dir,
                                                               const LlavaConfig& config,
                                                               Backend& backend);

}  // namespace ib
