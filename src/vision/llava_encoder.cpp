// LLaVA's vision tower and projector as the engine's VisionEncoder.
#include "vision/llava_encoder.h"

#include <utility>

#include "core/fs.h"

namespace ib {

bool is_llava(const ModelConfig& model) {
  return model.hf_architecture == "LlavaForConditionalGeneration";
}

Status LlavaVisionEncoder::encode_images(std::span<const ImageInput* const> images, Tensor out) {
  const int64_t s = config_.vision.image_size_px, n = static_cast<int64_t>(images.size());
  IB_ASSIGN_OR_RETURN(const Tensor pixels, scratch_.input({n * 3 * s, s}));  // (N 3 S, S)
  for (int64_t k = 0; k < n; ++k) {
    const ImageInput& image = *images[static_cast<size_t>(k)];
    IB_ASSERT(static_cast<int64_t>(image.pixel_values.size()) == 3 * s * s,
              "LlavaVisionEncoder: pixel values of the wrong size (the engine checks them)");
    backend_.copy_from_host(pixels.slice_rows(k * 3 * s, 3 * s), image.pixel_values.data(),
                            DType::kF32);
  }
  IB_TRY(encode_llava_pixels(backend_, weights_, config_, pixels, out, scratch_));
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
