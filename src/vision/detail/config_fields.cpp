// Typed JSON config fields with errors a user can act on.
#include "vision/detail/config_fields.h"

namespace ib::detail {

Result<int64_t> int_field(const nlohmann::json& obj, const char* key, int64_t fallback, int64_t lo,
                          int64_t hi, const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  const auto& v = obj[key];
  if (!v.is_number_integer() || v.get<int64_t>() < lo || v.get<int64_t>() > hi) {
    return user_error(where + ": \"" + key + "\" must be an integer in " + std::to_string(lo) +
                      ".." + std::to_string(hi));
  }
  return v.get<int64_t>();
}

Status string_must_be(const nlohmann::json& obj, const char* key, std::string_view want,
                      const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return Ok{};
  if (!obj[key].is_string() || obj[key].get<std::string>() != want) {
    return user_error(where + ": " + key + " " + obj[key].dump() + " is not supported (\"" +
                      std::string(want) + "\" only)");
  }
  return Ok{};
}

Result<bool> flag(const nlohmann::json& obj, const char* key, bool fallback,
                  const std::string& where) {
  if (!obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_boolean()) return user_error(where + ": \"" + key + "\" must be true or false");
  return obj[key].get<bool>();
}

Result<std::array<double, 3>> triple(const nlohmann::json& obj, const char* key,
                                     std::array<double, 3> fallback, const std::string& where) {
  if (!obj.contains(key)) return fallback;
  const auto& j = obj[key];
  if (!j.is_array() || j.size() != 3 || !j[0].is_number() || !j[1].is_number() ||
      !j[2].is_number()) {
    return user_error(where + ": \"" + key + "\" must be three numbers (R, G, B)");
  }
  return std::array<double, 3>{j[0].get<double>(), j[1].get<double>(), j[2].get<double>()};
}

Status read_normalization(const nlohmann::json& root, const std::string& where,
                          ClipPreprocessConfig& config) {
  auto do_rescale = flag(root, "do_rescale", true, where);
  auto do_normalize = flag(root, "do_normalize", true, where);
  if (!do_rescale.ok()) return do_rescale.error();
  if (!do_normalize.ok()) return do_normalize.error();
  config.do_rescale = *do_rescale;
  config.do_normalize = *do_normalize;
  if (root.contains("rescale_factor")) {
    if (!root["rescale_factor"].is_number() || root["rescale_factor"].get<double>() <= 0) {
      return user_error(where + ": \"rescale_factor\" must be a positive number");
    }
    config.rescale_factor = root["rescale_factor"].get<double>();
  }
  auto mean = triple(root, "image_mean", config.image_mean, where);
  auto std_dev = triple(root, "image_std", config.image_std, where);
  if (!mean.ok()) return mean.error();
  if (!std_dev.ok()) return std_dev.error();
  config.image_mean = *mean;
  config.image_std = *std_dev;
  for (double s : config.image_std) {
    if (!(s > 0)) return user_error(where + ": \"image_std\" must be positive");
  }
  return Ok{};
}

}  // namespace ib::detail
