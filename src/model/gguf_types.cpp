// GGUF metadata value helpers (gguf_file.h); ggml's type ids are core/ggml_blocks.h.
#include <limits>

#include "model/gguf_file.h"

namespace ib {

std::string_view gguf_value_type_name(GgufValueType type) {
  switch (type) {
    case GgufValueType::kU8:
      return "uint8";
    case GgufValueType::kI8:
      return "int8";
    case GgufValueType::kU16:
      return "uint16";
    case GgufValueType::kI16:
      return "int16";
    case GgufValueType::kU32:
      return "uint32";
    case GgufValueType::kI32:
      return "int32";
    case GgufValueType::kF32:
      return "float32";
    case GgufValueType::kBool:
      return "bool";
    case GgufValueType::kString:
      return "string";
    case GgufValueType::kArray:
      return "array";
    case GgufValueType::kU64:
      return "uint64";
    case GgufValueType::kI64:
      return "int64";
    case GgufValueType::kF64:
      return "float64";
  }
  return "unknown";
}

GgufValue GgufValue::of_strings(const std::vector<std::string>& items) {
  std::vector<GgufValue> values;
  values.reserve(items.size());
  for (const auto& s : items) values.push_back(of_string(s));
  return of_array(GgufValueType::kString, std::move(values));
}

std::optional<int64_t> GgufValue::as_int() const {
  if (const auto* u = std::get_if<uint64_t>(&value)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(*u);
  }
  if (const auto* i = std::get_if<int64_t>(&value)) return *i;
  return std::nullopt;
}

std::optional<double> GgufValue::as_number() const {
  if (const auto* u = std::get_if<uint64_t>(&value)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<int64_t>(&value)) return static_cast<double>(*i);
  if (const auto* f = std::get_if<double>(&value)) return *f;
  return std::nullopt;
}

int64_t GgufTensorInfo::numel() const {
  int64_t n = 1;
  for (const int64_t d : dims) n *= d;
  return n;
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& m : metadata) {
    if (m.key == key) return &m.value;
  }
  return nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

}  // namespace ib
