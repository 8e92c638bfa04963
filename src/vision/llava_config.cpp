// Reading LLaVA's config.json (the vision tower, the projector and the image token).
#include "vision/llava_config.h"

#include <nlohmann/json.hpp>

#include "vision/detail/config_fields.h"

namespace ib {

using detail::int_field;
using detail::string_must_be;

Result<LlavaConfig> parse_llava_config(std::string_view json, std::string_view origin) {
  const std::string where(origin);
  const auto root = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return user_error(where + " is not a JSON object; pass the model's config.json");
  }
  if (!root.contains("vision_config") || !root["vision_config"].is_object()) {
    return user_error(where + " has no \"vision_config\": the model has no vision tower");
  }
  const auto& vc = root["vision_config"];
  const std::string vwhere = where + " vision_config";
  LlavaConfig config;
  ClipVisionConfig& v = config.vision;
  for (const auto& status : {string_must_be(vc, "model_type", "clip_vision_model", vwhere),
                             string_must_be(vc, "hidden_act", "quick_gelu", vwhere),
                             string_must_be(root, "projector_hidden_act", "gelu", where)}) {
    if (!status.ok()) return status.error();
  }
  auto hidden = int_field(vc, "hidden_size", v.hidden_size, 1, 1 << 16, vwhere);
  auto inter = int_field(vc, "intermediate_size", v.intermediate_size, 1, 1 << 18, vwhere);
  auto layers = int_field(vc, "num_hidden_layers", v.num_hidden_layers, 1, 256, vwhere);
  auto heads = int_field(vc, "num_attention_heads", v.num_attention_heads, 1, 1024, vwhere);
  auto image = int_field(vc, "image_size", v.image_size_px, 1, 8192, vwhere);
  auto patch = int_field(vc, "patch_size", v.patch_size_px, 1, 1024, vwhere);
  for (const auto* r : {&hidden, &inter, &layers, &heads, &image, &patch}) {
    if (!r->ok()) return r->error();
  }
  v.hidden_size = *hidden;
  v.intermediate_size = *inter;
  v.num_hidden_layers = static_cast<int>(*layers);
  v.num_attention_heads = static_cast<int>(*heads);
  v.image_size_px = *image;
  v.patch_size_px = *patch;
  if (vc.contains("layer_norm_eps")) {
    if (!vc["layer_norm_eps"].is_number() || !(vc["layer_norm_eps"].get<double>() > 0)) {
      return user_error(vwhere + ": \"layer_norm_eps\" must be a positive number");
    }
    v.layer_norm_eps = vc["layer_norm_eps"].get<double>();
  }
  if (v.hidden_size % v.num_attention_heads != 0) {
    return user_error(vwhere + ": hidden_size " + std::to_string(v.hidden_size) +
                      " is not a multiple of num_attention_heads " +
                      std::to_string(v.num_attention_heads));
  }
  if (v.image_size_px % v.patch_size_px != 0) {
    return user_error(vwhere + ": image_size " + std::to_string(v.image_size_px) +
                      " is not a multiple of patch_size " + std::to_string(v.patch_size_px));
  }
  const nlohmann::json text = root.value("text_config", nlohmann::json::object());
  auto text_hidden =
      int_field(text, "hidden_size", config.text_hidden_size, 1, 1 << 17, where + " text_config");
  if (!text_hidden.ok()) return text_hidden.error();
  config.text_hidden_size = *text_hidden;
  const char* token_key = root.contains("image_token_id") ? "image_token_id" : "image_token_index";
  auto token = int_field(root, token_key, config.image_token_id, 0, (1LL << 31) - 1, where);
  if (!token.ok()) return token.error();
  config.image_token_id = *token;
  if (root.contains("vision_feature_layer") && root["vision_feature_layer"].is_array()) {
    return user_error(where + ": a list of vision_feature_layer is not supported (one layer)");
  }
  const int64_t n = v.num_hidden_layers;
  auto layer =
      int_field(root, "vision_feature_layer", config.vision_feature_layer, -(n + 1), n, where);
  if (!layer.ok()) return layer.error();
  config.vision_feature_layer = static_cast<int>(*layer);
  if (root.contains("vision_feature_select_strategy")) {
    const auto& s = root["vision_feature_select_strategy"];
    if (!s.is_string() || (s != "default" && s != "full")) {
      return user_error(where + ": vision_feature_select_strategy " + s.dump() +
                        " is not supported (\"default\" or \"full\")");
    }
    config.drop_class_token = s == "default";
  }
  if (root.contains("multimodal_projector_bias")) {
    if (!root["multimodal_projector_bias"].is_boolean()) {
      return user_error(where + ": \"multimodal_projector_bias\" must be true or false");
    }
    config.projector_bias = root["multimodal_projector_bias"].get<bool>();
  }
  return config;
}

}  // namespace ib
