// /v1/load_lora_adapter and /v1/unload_lora_adapter (lora_endpoints.h).
#include "server/detail/lora_endpoints.h"

#include <algorithm>
#include <chrono>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace ib::detail {
namespace {

using nlohmann::json;

// The string field key of body, or an ApiError naming it.
std::variant<std::string, ApiError> string_field(const json& doc, const char* key) {
  const auto it = doc.find(key);
  if (it == doc.end() || !it->is_string() || it->get<std::string>().empty()) {
    return bad_field(key, fmt::format("'{}' must be a non-empty string", key), "missing_field");
  }
  return it->get<std::string>();
}

ApiError refused(const std::string& message) {
  return bad_field("lora_name", message, "invalid_lora_adapter");
}

}  // namespace

std::variant<std::string, ApiError> load_lora_body(std::string_view body, Generator& generator,
                                                   ServedModel& model) {
  const json doc = json::parse(body, nullptr, false);
  if (!doc.is_object()) return bad_field("", "the body must be a JSON object");
  auto name = string_field(doc, "lora_name");
  if (auto* e = std::get_if<ApiError>(&name)) return *e;
  auto path = string_field(doc, "lora_path");
  if (auto* e = std::get_if<ApiError>(&path)) return *e;
  const std::string& n = std::get<std::string>(name);
  if (model.serves(n)) {
    return refused(
        fmt::format("the model '{}' is already served; unload it first or choose "
                    "another lora_name",
                    n));
  }
  const auto start = std::chrono::steady_clock::now();
  const Status loaded = generator.load_lora(n, std::get<std::string>(path));
  if (!loaded.ok()) return refused(loaded.error().message);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  model.lora_adapters.push_back({n, std::get<std::string>(path)});
  return fmt::format("Success: LoRA adapter '{}' added successfully ({:.1f} ms).", n, ms);
}

std::variant<std::string, ApiError> unload_lora_body(std::string_view body, Generator& generator,
                                                     ServedModel& model) {
  const json doc = json::parse(body, nullptr, false);
  if (!doc.is_object()) return bad_field("", "the body must be a JSON object");
  auto name = string_field(doc, "lora_name");
  if (auto* e = std::get_if<ApiError>(&name)) return *e;
  const std::string& n = std::get<std::string>(name);
  if (!model.is_adapter(n)) return model_not_found(n, model);
  const Status removed = generator.unload_lora(n);
  if (!removed.ok()) return refused(removed.error().message);
  auto& loras = model.lora_adapters;
  loras.erase(
      std::remove_if(loras.begin(), loras.end(), [&](const ServedLora& l) { return l.name == n; }),
      loras.end());
  return fmt::format("Success: LoRA adapter '{}' removed successfully.", n);
}

}  // namespace ib::detail
