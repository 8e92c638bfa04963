// Private to vision/: typed fields of a checkpoint's JSON configs (config.json's vision half,
// preprocessor_config.json), each a user error naming the file, the key and what it must be.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/result.h"
#include "vision/clip_preprocess.h"

namespace ib::detail {

// An integer in [lo, hi], or fallback when absent (or null).
Result<int64_t> int_field(const nlohmann::json& obj, const char* key, int64_t fallback, int64_t lo,
                          int64_t hi, const std::string& where);
// Ok when the string key is absent or want.
Status string_must_be(const nlohmann::json& obj, const char* key, std::string_view want,
                      const std::string& where);
// A boolean, or fallback when absent (or null).
Result<bool> flag(const nlohmann::json& obj, const char* key, bool fallback,
                  const std::string& where);
// Three numbers (R, G, B), or fallback when absent.
Result<std::array<double, 3>> triple(const nlohmann::json& obj, const char* key,
                                     std::array<double, 3> fallback, const std::string& where);

// The rescale and normalisation fields of a preprocessor_config.json (do_rescale,
// rescale_factor, do_normalize, image_mean, image_std) into config, absent ones kept.
Status read_normalization(const nlohmann::json& root, const std::string& where,
                          ClipPreprocessConfig& config);

}  // namespace ib::detail
