// Safetensors header parsing and validation, and the writer. The mapped checkpoint (single file or
// sharded) lives in safetensors_checkpoint.cpp.
#include "model/safetensors.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include <nlohmann/json.hpp>

namespace ib {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the format's own limit
constexpr uint64_t kDataAlignment = 8;

std::optional<DType> parse_st_dtype(const std::string& s) {
  if (s == "F32") return DType::kF32;
  if (s == "BF16") return DType::kBF16;
  if (s == "F16") return DType::kF16;
  if (s == "F8_E4M3") return DType::kF8E4M3;  // FP8 checkpoints' weights
  if (s == "I8") return DType::kI8;           // INT8 checkpoints' weights
  if (s == "I32") return DType::kI32;         // 4-bit checkpoints' packed codes, g_idx
  if (s == "U8") return DType::kU8;           // bitsandbytes' packed codes and quant_state
  if (s == "I64") return DType::kI64;         // compressed-tensors' weight_shape
  return std::nullopt;
}

bool is_known_st_dtype(const std::string& s) {
  static constexpr const char* kKnown[] = {
      "F64", "I64",  "U64",     "I32",     "U32",     "I16",     "U16",     "I8",
      "U8",  "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F6_E2M3", "F6_E3M2", "F4"};
  for (const char* k : kKnown) {
    if (s == k) return true;
  }
  return false;
}

const char* st_dtype_name(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kBF16:
      return "BF16";
    case DType::kF16:
      return "F16";
    case DType::kF8E4M3:
      return "F8_E4M3";
    case DType::kI8:
      return "I8";
    case DType::kI32:
      return "I32";
    case DType::kU8:
      return "U8";
    case DType::kI64:
      return "I64";
    default:
      return nullptr;
  }
}

// A non-negative integer JSON value, or nullopt.
std::optional<uint64_t> as_count(const Json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0)
    return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const Json& v, uint64_t data_bytes) {
  const std::string where = "tensor '" + name + "'";
  if (!v.is_object()) return user_error(where + " is not a JSON object");
  SafetensorsEntry e;

  const auto dtype_it = v.find("dtype");
  if (dtype_it == v.end() || !dtype_it->is_string()) {
    return user_error(where + ": missing or non-string \"dtype\"");
  }
  const auto& dtype_s = dtype_it->get_ref<const std::string&>();
  const auto dtype = parse_st_dtype(dtype_s);
  if (!dtype) {
    if (is_known_st_dtype(dtype_s)) {
      return user_error(where + " has dtype " + dtype_s +
                        ", which inferbench cannot load (BF16, F16, F32, F8_E4M3 / I8 in FP8 / "
                        "INT8 checkpoints, I32 / U8 / I64 in 4-bit ones); use an unquantized "
                        "checkpoint");
    }
    return user_error(where + " has unknown dtype \"" + dtype_s.substr(0, 32) + "\"");
  }
  e.dtype = *dtype;

  const auto shape_it = v.find("shape");
  if (shape_it == v.end() || !shape_it->is_array()) {
    return user_error(where + ": missing or non-array \"shape\"");
  }
  uint64_t numel = 1;
  for (const auto& d : *shape_it) {
    const auto dim = as_count(d);
    if (!dim || *dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return user_error(where + ": \"shape\" must hold non-negative integers");
    }
    if (*dim != 0 && numel > std::numeric_limits<uint64_t>::max() / *dim) {
      return user_error(where + ": shape is too large");
    }
    numel *= *dim;
    e.shape.push_back(static_cast<int64_t>(*dim));
  }

  const auto off_it = v.find("data_offsets");
  if (off_it == v.end() || !off_it->is_array() || off_it->size() != 2) {
    return user_error(where + ": \"data_offsets\" must be an array [begin, end]");
  }
  const auto begin = as_count((*off_it)[0]);
  const auto end = as_count((*off_it)[1]);
  if (!begin || !end) return user_error(where + ": \"data_offsets\" must be non-negative integers");
  if (*begin > *end || *end > data_bytes) {
    return user_error(where + ": data_offsets [" + std::to_string(*begin) + ", " +
                      std::to_string(*end) + "] lie outside the " + std::to_string(data_bytes) +
                      "-byte data section (truncated or corrupt file; re-download it)");
  }
  e.begin = *begin;
  e.end = *end;
  const uint64_t elem = dtype_size(e.dtype);
  if (numel > std::numeric_limits<uint64_t>::max() / elem || numel * elem != e.end - e.begin) {
    return user_error(where + ": data_offsets span " + std::to_string(e.end - e.begin) +
                      " bytes but shape " + shape_string(e.shape) + " of " + dtype_s + " needs " +
                      (numel > std::numeric_limits<uint64_t>::max() / elem
                           ? std::string("more than 2^64")
                           : std::to_string(numel * elem)));
  }
  return e;
}

Result<SafetensorsHeader> parse_header_json(const Json& root, uint64_t data_bytes) {
  if (!root.is_object()) return user_error("safetensors header is not a JSON object");
  SafetensorsHeader header;
  for (const auto& [key, value] : root.items()) {
    if (key == "__metadata__") {
      if (!value.is_object()) return user_error("\"__metadata__\" is not a JSON object");
      for (const auto& [mk, mv] : value.items()) {
        if (!mv.is_string()) {
          return user_error("\"__metadata__\" value for \"" + mk + "\" is not a string");
        }
        header.metadata.emplace(mk, mv.get<std::string>());
      }
      continue;
    }
    IB_ASSIGN_OR_RETURN(auto entry, parse_entry(key, value, data_bytes));
    header.tensors.emplace(key, std::move(entry));
  }
  return header;
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors_header(std::string_view json, uint64_t data_bytes) {
  const Json root = Json::parse(json.begin(), json.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return user_error("safetensors header is not valid JSON");
  try {
    return parse_header_json(root, data_bytes);
  } catch (const Json::exception& e) {  // defensive: every access above is type-checked
    return user_error(std::string("safetensors header: ") + e.what());
  }
}

Result<SafetensorsFile> parse_safetensors_file(std::string_view file_bytes,
                                               const std::string& file_name) {
  auto fail = [&](const std::string& what) -> Error {
    return user_error(file_name + ": " + what +
                      "; the file is not valid safetensors (re-download "
                      "or re-export it)");
  };
  if (file_bytes.size() < 8) {
    return fail("only " + std::to_string(file_bytes.size()) +
                " bytes, shorter than the 8-byte "
                "header length");
  }
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) {
    header_bytes =
        (header_bytes << 8) | static_cast<unsigned char>(file_bytes[static_cast<size_t>(i)]);
  }
  const uint64_t rest = file_bytes.size() - 8;
  if (header_bytes > rest || header_bytes > kMaxHeaderBytes) {
    return fail("header length " + std::to_string(header_bytes) + " exceeds the " +
                std::to_string(std::min(rest, kMaxHeaderBytes)) + " bytes available");
  }
  const std::string_view json = file_bytes.substr(8, static_cast<size_t>(header_bytes));
  if (json.empty() || json.front() != '{') return fail("header does not start with '{'");
  auto header = parse_safetensors_header(json, rest - header_bytes);
  if (!header.ok()) return fail(header.error().message);
  return SafetensorsFile{std::move(header).value(), 8 + header_bytes};
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t HostTensorRef::numel() const {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

Status write_safetensors(const std::string& path,
                         const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& t : tensors) {
    const char* dtype = st_dtype_name(t.dtype);
    if (dtype == nullptr) {
      return user_error("cannot write tensor '" + t.name + "' as " +
                        std::string(dtype_name(t.dtype)) + ": not a safetensors dtype");
    }
    if (t.name == "__metadata__" || !seen.insert(t.name).second) {
      return user_error("cannot write tensor '" + t.name + "': reserved or duplicate name");
    }
    uint64_t numel = 1;
    for (const int64_t d : t.shape) {
      if (d < 0) return user_error("tensor '" + t.name + "' has a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * dtype_size(t.dtype) != t.bytes.size()) {
      return user_error("tensor '" + t.name + "': " + std::to_string(t.bytes.size()) +
                        " bytes given for shape " + shape_string(t.shape) + " of " + dtype);
    }
    header[t.name] = {
        {"dtype", dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  std::string json = header.dump(-1, ' ', false, Json::error_handler_t::replace);
  while ((8 + json.size()) % kDataAlignment != 0) json.push_back(' ');

  namespace fs = std::filesystem;
  const fs::path tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return runtime_error("cannot write " + tmp.string() + ": " + std::strerror(errno));
    char len[8];
    for (int i = 0; i < 8; ++i) len[i] = static_cast<char>((json.size() >> (8 * i)) & 0xffu);
    out.write(len, 8);
    out.write(json.data(), static_cast<std::streamsize>(json.size()));
    for (const auto& t : tensors) {
      out.write(t.bytes.data(), static_cast<std::streamsize>(t.bytes.size()));
    }
    out.flush();
    if (!out) {
      std::error_code ignored;
      fs::remove(tmp, ignored);
      return runtime_error("write to " + tmp.string() + " failed (disk full?)");
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec)
    return runtime_error("cannot rename " + tmp.string() + " to " + path + ": " + ec.message());
  return Ok{};
}

}  // namespace ib
