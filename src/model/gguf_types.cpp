// ggml type ids and names, and GGUF metadata value helpers (gguf_file.h).
#include <array>
#include <cctype>
#include <limits>

#include "model/gguf_file.h"

namespace ib {
namespace {

constexpr GgmlTypeInfo kSupported[] = {
    {GgmlType::kF32, "F32", 1, 4},       {GgmlType::kF16, "F16", 1, 2},
    {GgmlType::kQ4_0, "Q4_0", 32, 18},   {GgmlType::kQ8_0, "Q8_0", 32, 34},
    {GgmlType::kQ4_K, "Q4_K", 256, 144}, {GgmlType::kQ5_K, "Q5_K", 256, 176},
    {GgmlType::kQ6_K, "Q6_K", 256, 210}, {GgmlType::kBF16, "BF16", 1, 2},
};

// ggml's names by id ("" where an id was retired or never used).
constexpr std::array<std::string_view, 40> kIdNames = {
    "F32",   "F16",        "Q4_0",       "Q4_1",       "",         "",         "Q5_0",
    "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
    "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
    "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
    "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
    "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) !=
        std::toupper(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  for (const auto& info : kSupported) {
    if (info.type == type) return info;
  }
  IB_ASSERT(false, "GgmlType without a table entry");
  return kSupported[0];
}

std::optional<GgmlType> ggml_type_of_id(uint32_t id) {
  for (const auto& info : kSupported) {
    if (static_cast<uint32_t>(info.type) == id) return info.type;
  }
  return std::nullopt;
}

std::string_view ggml_type_id_name(uint32_t id) {
  return id < kIdNames.size() ? kIdNames[id] : std::string_view();
}

std::optional<GgmlType> ggml_type_of_name(std::string_view name) {
  for (const auto& info : kSupported) {
    if (iequals(info.name, name)) return info.type;
  }
  return std::nullopt;
}

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
