// Typed, non-throwing access to the fields of a JSON object (private to model/), with errors that
// name the field and the file: "DIR/config.json: \"hidden_size\" must be an integer".
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>

#include "core/result.h"

namespace ib::detail {

class JsonFields {
 public:
  // obj must outlive this view. where prefixes every error (e.g. the file path).
  JsonFields(const nlohmann::json& obj, std::string where) : obj_(&obj), where_(std::move(where)) {}

  // Present and not null.
  bool has(const char* key) const;
  // An integer in [INT32_MIN, INT32_MAX]; required fields fail when absent or null.
  Result<int> required_int(const char* key) const;
  Result<int> optional_int(const char* key, int fallback) const;
  Result<double> optional_number(const char* key, double fallback) const;
  Result<bool> optional_bool(const char* key, bool fallback) const;
  Result<std::string> optional_string(const char* key, const std::string& fallback) const;
  // A nested object (absent or null: nullopt).
  Result<std::optional<JsonFields>> optional_object(const char* key) const;

  Error error(const std::string& what) const;
  const nlohmann::json& json() const { return *obj_; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json* find(const char* key) const;  // nullptr when absent or null
  Error type_error(const char* key, const char* expected) const;
  Error out_of_range(const char* key) const;

  const nlohmann::json* obj_;  // not owned
  std::string where_;
};

}  // namespace ib::detail
