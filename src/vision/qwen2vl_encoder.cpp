// Qwen2-VL's vision tower as the engine's VisionEncoder, its files, and its requests' prompts.
#include "vision/qwen2vl_encoder.h"

#include <utility>

#include "core/fs.h"
#include "vision/image_tokens.h"
#include "vision/qwen2vl_positions.h"

namespace ib {

bool is_qwen2vl(const ModelConfig& model) {
  return model.hf_architecture == "Qwen2VLForConditionalGeneration";
}

Result<int64_t> Qwen2VlVisionEncoder::image_tokens(const ImageInput& image) const {
  const int64_t m = config_.vision.spatial_merge_size;
  const auto& g = image.grid_thw;
  if (g.size() != 3 || g[0] <= 0 || g[1] <= 0 || g[2] <= 0 || g[1] % m != 0 || g[2] % m != 0) {
    return user_error("a Qwen2-VL image needs its patch grid (t, h, w), h and w multiples of " +
                      std::to_string(m) + " (preprocess it with preprocess_qwen2vl)");
  }
  return g[0] * g[1] * g[2] / config_.vision.merge_units();
}

int64_t Qwen2VlVisionEncoder::pixel_values(const ImageInput& image) const {
  const auto& g = image.grid_thw;
  if (g.size() != 3) return 0;
  return g[0] * g[1] * g[2] * config_.vision.patch_values();
}

Status Qwen2VlVisionEncoder::encode_images(std::span<const ImageInput* const> images, Tensor out) {
  std::vector<std::array<int64_t, 3>> grids;
  std::vector<float> pixels;
  int64_t rows = 0;
  for (const ImageInput* image : images) {
    IB_ASSIGN_OR_RETURN(const int64_t tokens, image_tokens(*image));
    IB_ASSERT(static_cast<int64_t>(image->pixel_values.size()) == pixel_values(*image),
              "Qwen2VlVisionEncoder: pixel values of the wrong size (the engine checks them)");
    grids.push_back({image->grid_thw[0], image->grid_thw[1], image->grid_thw[2]});
    pixels.insert(pixels.end(), image->pixel_values.begin(), image->pixel_values.end());
    rows += tokens;
  }
  IB_ASSERT(out.rows() == rows && out.row_size() == config_.text_hidden_size,
            "Qwen2VlVisionEncoder: out must be (visual tokens, text hidden size)");
  IB_TRY(encode_qwen2vl_images(backend_, weights_, config_, pixels, grids, out, &scratch_));
  return backend_.device_status();
}

Result<Qwen2VlModelFiles> read_qwen2vl_files(const std::string& dir) {
  Qwen2VlModelFiles files;
  IB_ASSIGN_OR_RETURN(const std::string config_text, read_file(dir + "/config.json"));
  IB_ASSIGN_OR_RETURN(files.config, parse_qwen2vl_config(config_text, dir + "/config.json"));
  const std::string pre_path = dir + "/preprocessor_config.json";
  IB_ASSIGN_OR_RETURN(const std::string pre_text, read_file(pre_path));
  IB_ASSIGN_OR_RETURN(files.preprocess, parse_qwen2vl_preprocess_config(pre_text, pre_path));
  IB_TRY(check_qwen2vl_preprocess(files.preprocess, files.config.vision, pre_path));
  return files;
}

Result<std::unique_ptr<Qwen2VlVisionEncoder>> load_qwen2vl_encoder(const std::string& dir,
                                                                   const Qwen2VlConfig& config,
                                                                   Backend& backend) {
  IB_ASSIGN_OR_RETURN(auto checkpoint, SafetensorsCheckpoint::open(dir));
  IB_ASSIGN_OR_RETURN(Qwen2VlVisionWeights weights,
                      load_qwen2vl_vision_weights(backend, *checkpoint, config));
  return std::make_unique<Qwen2VlVisionEncoder>(backend, config, std::move(weights));
}

Status prepare_qwen2vl_request(const Qwen2VlConfig& config, std::vector<Qwen2VlPixels> images,
                               GenerationRequest& request) {
  const int64_t m = config.vision.spatial_merge_size;
  std::vector<int64_t> counts;
  std::vector<std::array<int64_t, 3>> grids;
  for (const Qwen2VlPixels& p : images) {
    counts.push_back(p.tokens(m));
    grids.push_back(p.grid_thw);
  }
  IB_ASSIGN_OR_RETURN(ExpandedPrompt expanded,
                      expand_image_tokens(request.prompt_tokens,
                                          static_cast<int32_t>(config.image_token_id), counts));
  IB_ASSIGN_OR_RETURN(request.mrope_positions,
                      qwen2vl_mrope_positions(expanded.token_ids, config, grids));
  request.prompt_tokens = std::move(expanded.token_ids);
  request.images.clear();
  for (size_t i = 0; i < images.size(); ++i) {
    ImageInput image;
    image.start_pos = static_cast<int>(expanded.image_start[i]);
    image.pixel_values = std::move(images[i].values);
    image.grid_thw.assign(grids[i].begin(), grids[i].end());
    request.images.push_back(std::move(image));
  }
  return Ok{};
}

}  // namespace ib
