// Reading Qwen2-VL's config.json (vision_config, special tokens) and preprocessor_config.json.
#include "vision/qwen2vl_config.h"

#include <nlohmann/json.hpp>
#include <string>

#include "vision/detail/config_fields.h"

namespace ib {

using detail::int_field;

namespace {

constexpr int kBicubic = 3;  // PIL.Image.Resampling.BICUBIC

Result<nlohmann::json> json_object(std::string_view json, const std::string& where) {
  auto root = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return user_error(where + " is not a JSON object; pass the model's own file");
  }
  return root;
}

}  // namespace

Result<Qwen2VlConfig> parse_qwen2vl_config(std::string_view json, std::string_view origin) {
  const std::string where(origin);
  IB_ASSIGN_OR_RETURN(const nlohmann::json root, json_object(json, where));
  if (!root.contains("vision_config") || !root["vision_config"].is_object()) {
    return user_error(where + " has no \"vision_config\": the model has no vision tower");
  }
  const auto& vc = root["vision_config"];
  const std::string vwhere = where + " vision_config";
  Qwen2VlConfig config;
  Qwen2VlVisionConfig& v = config.vision;
  IB_TRY(detail::string_must_be(vc, "hidden_act", "quick_gelu", vwhere));
  // The published files name the channels in_chans, transformers in_channels.
  const char* channels_key = vc.contains("in_channels") ? "in_channels" : "in_chans";
  if (auto channels = int_field(vc, channels_key, 3, 3, 3, vwhere); !channels.ok()) {
    return channels.error();
  }
  IB_ASSIGN_OR_RETURN(const int64_t depth, int_field(vc, "depth", v.depth, 1, 256, vwhere));
  IB_ASSIGN_OR_RETURN(v.embed_dim, int_field(vc, "embed_dim", v.embed_dim, 1, 1 << 16, vwhere));
  IB_ASSIGN_OR_RETURN(const int64_t heads,
                      int_field(vc, "num_heads", v.num_heads, 1, 1024, vwhere));
  IB_ASSIGN_OR_RETURN(v.patch_size_px,
                      int_field(vc, "patch_size", v.patch_size_px, 1, 1024, vwhere));
  IB_ASSIGN_OR_RETURN(v.spatial_merge_size,
                      int_field(vc, "spatial_merge_size", v.spatial_merge_size, 1, 16, vwhere));
  IB_ASSIGN_OR_RETURN(v.temporal_patch_size,
                      int_field(vc, "temporal_patch_size", v.temporal_patch_size, 1, 16, vwhere));
  IB_ASSIGN_OR_RETURN(config.text_hidden_size,
                      int_field(vc, "hidden_size", 3584, 1, 1 << 17, vwhere));
  v.depth = static_cast<int>(depth);
  v.num_heads = static_cast<int>(heads);
  double ratio = 4;
  if (vc.contains("mlp_ratio")) {
    if (!vc["mlp_ratio"].is_number() || !(vc["mlp_ratio"].get<double>() > 0)) {
      return user_error(vwhere + ": \"mlp_ratio\" must be a positive number");
    }
    ratio = vc["mlp_ratio"].get<double>();
  }
  v.mlp_hidden =
      static_cast<int64_t>(static_cast<double>(v.embed_dim) * ratio);  // int(), as Python
  if (v.embed_dim % v.num_heads != 0 || v.head_dim() % 4 != 0) {
    return user_error(vwhere + ": embed_dim " + std::to_string(v.embed_dim) + " / num_heads " +
                      std::to_string(v.num_heads) +
                      " must be a whole head_dim that is a multiple of 4 (the 2-D rotary "
                      "embedding splits it into height and width quarters)");
  }
  // The language model's hidden size: text_config's (transformers 5) or the top level's.
  const nlohmann::json& text =
      root.contains("text_config") && root["text_config"].is_object() ? root["text_config"] : root;
  IB_ASSIGN_OR_RETURN(const int64_t text_hidden,
                      int_field(text, "hidden_size", 8192, 1, 1 << 17, where));
  if (text_hidden != config.text_hidden_size) {
    return user_error(vwhere + ": hidden_size " + std::to_string(config.text_hidden_size) +
                      " (the merger's output) is not the language model's hidden_size " +
                      std::to_string(text_hidden) + "; is config.json the checkpoint's own?");
  }
  constexpr int64_t kMaxId = (1LL << 31) - 1;
  IB_ASSIGN_OR_RETURN(config.image_token_id,
                      int_field(root, "image_token_id", config.image_token_id, 0, kMaxId, where));
  IB_ASSIGN_OR_RETURN(config.video_token_id,
                      int_field(root, "video_token_id", config.video_token_id, 0, kMaxId, where));
  IB_ASSIGN_OR_RETURN(
      config.vision_start_token_id,
      int_field(root, "vision_start_token_id", config.vision_start_token_id, 0, kMaxId, where));
  IB_ASSIGN_OR_RETURN(
      config.vision_end_token_id,
      int_field(root, "vision_end_token_id", config.vision_end_token_id, 0, kMaxId, where));
  return config;
}

Result<Qwen2VlPreprocessConfig> parse_qwen2vl_preprocess_config(std::string_view json,
                                                                std::string_view origin) {
  const std::string where(origin);
  IB_ASSIGN_OR_RETURN(const nlohmann::json root, json_object(json, where));
  Qwen2VlPreprocessConfig config;
  if (root.contains("resample") && root["resample"] != kBicubic) {
    return user_error(where + ": resample " + root["resample"].dump() +
                      " is not supported (bicubic, 3, only)");
  }
  IB_ASSIGN_OR_RETURN(config.do_resize, detail::flag(root, "do_resize", true, where));
  constexpr int64_t kMaxPixels = 1LL << 40;
  const nlohmann::json size =
      root.contains("size") && root["size"].is_object() ? root["size"] : nlohmann::json::object();
  IB_ASSIGN_OR_RETURN(config.min_pixels, int_field(size, "shortest_edge", config.min_pixels, 1,
                                                   kMaxPixels, where + " size"));
  IB_ASSIGN_OR_RETURN(config.max_pixels, int_field(size, "longest_edge", config.max_pixels, 1,
                                                   kMaxPixels, where + " size"));
  IB_ASSIGN_OR_RETURN(config.min_pixels,
                      int_field(root, "min_pixels", config.min_pixels, 1, kMaxPixels, where));
  IB_ASSIGN_OR_RETURN(config.max_pixels,
                      int_field(root, "max_pixels", config.max_pixels, 1, kMaxPixels, where));
  if (config.min_pixels > config.max_pixels) {
    return user_error(where + ": min_pixels " + std::to_string(config.min_pixels) +
                      " exceeds max_pixels " + std::to_string(config.max_pixels));
  }
  IB_ASSIGN_OR_RETURN(config.patch_size_px,
                      int_field(root, "patch_size", config.patch_size_px, 1, 1024, where));
  IB_ASSIGN_OR_RETURN(
      config.temporal_patch_size,
      int_field(root, "temporal_patch_size", config.temporal_patch_size, 1, 16, where));
  IB_ASSIGN_OR_RETURN(config.merge_size,
                      int_field(root, "merge_size", config.merge_size, 1, 16, where));
  config.normalize.do_resize = false;
  config.normalize.do_center_crop = false;
  IB_TRY(detail::read_normalization(root, where, config.normalize));
  return config;
}

Status check_qwen2vl_preprocess(const Qwen2VlPreprocessConfig& p, const Qwen2VlVisionConfig& v,
                                std::string_view origin) {
  if (p.patch_size_px != v.patch_size_px || p.temporal_patch_size != v.temporal_patch_size ||
      p.merge_size != v.spatial_merge_size) {
    return user_error(
        std::string(origin) + ": patch_size " + std::to_string(p.patch_size_px) +
        ", temporal_patch_size " + std::to_string(p.temporal_patch_size) + " and merge_size " +
        std::to_string(p.merge_size) + " are not the vision tower's (" +
        std::to_string(v.patch_size_px) + ", " + std::to_string(v.temporal_patch_size) + ", " +
        std::to_string(v.spatial_merge_size) + "); the preprocessor is not this checkpoint's");
  }
  return Ok{};
}

}  // namespace ib
