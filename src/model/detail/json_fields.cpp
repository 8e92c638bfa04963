#include "model/detail/json_fields.h"

#include <cmath>
#include <limits>

namespace ib::detail {

const nlohmann::json* JsonFields::find(const char* key) const {
  const auto it = obj_->find(key);
  if (it == obj_->end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::has(const char* key) const {
  return find(key) != nullptr;
}

Error JsonFields::error(const std::string& what) const {
  return user_error(where_ + ": " + what);
}

Error JsonFields::type_error(const char* key, const char* expected) const {
  return error(std::string("\"") + key + "\" must be " + expected + " (got " +
               find(key)->type_name() + ")");
}

Error JsonFields::out_of_range(const char* key) const {
  return error(std::string("\"") + key + "\" is out of range");
}

Result<int> JsonFields::optional_int(const char* key, int fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  constexpr int64_t kMin = std::numeric_limits<int>::min();
  constexpr int64_t kMax = std::numeric_limits<int>::max();
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > static_cast<uint64_t>(kMax)) return out_of_range(key);
    return static_cast<int>(v->get<uint64_t>());
  }
  if (v->is_number_integer()) {
    const int64_t i = v->get<int64_t>();
    if (i < kMin || i > kMax) return out_of_range(key);
    return static_cast<int>(i);
  }
  if (v->is_number_float()) {  // e.g. 4096.0: accepted when integral
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && d >= static_cast<double>(kMin) &&
        d <= static_cast<double>(kMax)) {
      return static_cast<int>(d);
    }
  }
  return type_error(key, "an integer");
}

Result<int> JsonFields::required_int(const char* key) const {
  if (!has(key)) return error(std::string("missing required field \"") + key + "\"");
  return optional_int(key, 0);
}

Result<double> JsonFields::optional_number(const char* key, double fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_number()) return type_error(key, "a number");
  return v->get<double>();
}

Result<bool> JsonFields::optional_bool(const char* key, bool fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_boolean()) return type_error(key, "true or false");
  return v->get<bool>();
}

Result<std::string> JsonFields::optional_string(const char* key,
                                                const std::string& fallback) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return fallback;
  if (!v->is_string()) return type_error(key, "a string");
  return v->get<std::string>();
}

Result<std::optional<JsonFields>> JsonFields::optional_object(const char* key) const {
  const nlohmann::json* v = find(key);
  if (v == nullptr) return std::optional<JsonFields>();
  if (!v->is_object()) return type_error(key, "an object or null");
  return std::optional<JsonFields>(JsonFields(*v, where_ + " (" + key + ")"));
}

}  // namespace ib::detail
