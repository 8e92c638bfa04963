// LLaVA's vision tower and projector as the engine's VisionEncoder.
#include "vision/llava_encoder.h"

#include <utility>

#include "core/fs.h"
#include "vision/detail/vision_weights.h"

namespace ib {

bool is_llava(const ModelConfig& model) {
  return model.hf_architecture == "LlavaForConditionalGeneration";
}

Status LlavaVisionEncoder::encode(std::span<const float> pixel_values, int64_t num_images,
                                  std::vector<float>& out) {
  const int64_t rows = num_images * tokens_per_image();
  const int64_t dt = config_.text_hidden_size;
  const DType act = backend_.activation_dtype();
  IB_ASSIGN_OR_RETURN(
      Buffer buffer,
      backend_.alloc(static_cast<size_t>(rows * dt) * dtype_size(act), MemoryTag::kActivations));
  const Tensor features = buffer.view(act, {rows, dt});  // (visual tokens, Dt)
  IB_TRY(encode_llava_images(backend_, weights_, config_, pixel_values, num_images, features));
  detail::features_to_host(backend_, features, out);
  return backend_.device_status();
}

Result<LlavaModelFiles> read_llava_files(const std::string& dir) {
  LlavaModelFiles files;
  IB_ASSIGN_OR_RETURN(const std::string config_text, read_file(dir + "/config.json"));
  IB_ASSIGN_OR_RETURN(files.config, parse_llava_config(config_text, dir + "/config.json"));
  const std::string pre_path = dir + "/preprocessor_config.json";
  IB_ASSIGN_OR_RETURN(const std::string pre_text, read_file(pre_path));
  IB_ASSIGN_OR_RETURN(files.preprocess, parse_clip_preprocess_config(pre_text, pre_path));
  const int64_t s = files.config.vision.image_size_px;
  if (!files.preprocess.do_center_crop || files.preprocess.crop_height_px != s ||
      files.preprocess.crop_width_px != s) {
    return user_error(pre_path + ": the crop is not the vision tower's image_size " +
                      std::to_string(s) + "; the preprocessor is not this checkpoint's");
  }
  return files;
}

Result<std::unique_ptr<LlavaVisionEncoder>> load_llava_encoder(const std::string& dir,
                                                               const LlavaConfig& config,
                                                               Backend& backend) {
  IB_ASSIGN_OR_RETURN(auto checkpoint, SafetensorsCheckpoint::open(dir));
  IB_ASSIGN_OR_RETURN(LlavaVisionWeights weights,
                      load_llava_vision_weights(backend, *checkpoint, config));
  return std::make_unique<LlavaVisionEncoder>(backend, config, std::move(weights));
}

}  // namespace ib
