// GGUF parsing (gguf_file.h): a bounds-checked cursor over the file's bytes; every count is
// checked against the bytes left before anything is allocated for it.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "model/detail/mapped_file.h"
#include "model/gguf_file.h"

namespace ib {
namespace {

constexpr uint32_t kMaxDims = 4;         // GGML_MAX_DIMS
constexpr int kMaxArrayDepth = 4;        // arrays of arrays; no published file nests at all
constexpr uint64_t kMinTensorInfo = 24;  // empty name (8) + n_dims (4) + type (4) + offset (8)
constexpr uint64_t kMinMetadata = 13;    // empty key (8) + type (4) + one byte of value
// Metadata array elements in all: a published vocabulary's tokens, merges, types and scores come
// to about a million; a corrupt count must not make the parser hold 48 bytes per byte of file.
constexpr uint64_t kMaxArrayElements = uint64_t{1} << 23;
// Counts read from the file reserve at most this many entries up front; the rest grow as parsed.
constexpr uint64_t kMaxReserve = uint64_t{1} << 16;

uint64_t scalar_bytes(GgufValueType t) {
  switch (t) {
    case GgufValueType::kU8:
    case GgufValueType::kI8:
    case GgufValueType::kBool:
      return 1;
    case GgufValueType::kU16:
    case GgufValueType::kI16:
      return 2;
    case GgufValueType::kU32:
    case GgufValueType::kI32:
    case GgufValueType::kF32:
      return 4;
    case GgufValueType::kU64:
    case GgufValueType::kI64:
    case GgufValueType::kF64:
    case GgufValueType::kString:  // its length
      return 8;
    case GgufValueType::kArray:  // element type + count
      return 12;
  }
  return 1;
}

bool is_value_type(uint32_t id) {
  return id <= static_cast<uint32_t>(GgufValueType::kF64);
}

class Parser {
 public:
  Parser(std::string_view bytes, const std::string& file_name) : bytes_(bytes), name_(file_name) {}

  Result<GgufFile> parse();

 private:
  Error corrupt(const std::string& what) const {
    return user_error(
        fmt::format("{}: {}; the file is not valid GGUF (truncated or corrupt: "
                    "re-download or re-convert it)",
                    name_, what));
  }
  Error truncated(std::string_view what) const {
    return corrupt(fmt::format("the file ends at byte {} while reading {}", bytes_.size(), what));
  }
  uint64_t left() const { return bytes_.size() - pos_; }

  template <typename T>
  Result<T> read(std::string_view what) {
    if (left() < sizeof(T)) return truncated(what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));  // the format and the host: little-endian
    pos_ += sizeof(T);
    return v;
  }
  // A count of items of at least min_item_bytes each, checked against the bytes left.
  Result<uint64_t> read_count(std::string_view what, uint64_t min_item_bytes) {
    IB_ASSIGN_OR_RETURN(const uint64_t n, read<uint64_t>(what));
    if (n > left() / min_item_bytes) {
      return corrupt(
          fmt::format("{} is {}, more than the {} bytes left can hold", what, n, left()));
    }
    return n;
  }
  Result<std::string> read_string(std::string_view what) {
    IB_ASSIGN_OR_RETURN(const uint64_t n, read_count(what, 1));
    std::string s(bytes_.substr(pos_, n));
    pos_ += n;
    return s;
  }

  Result<GgufValue> read_value(GgufValueType type, const std::string& key, int depth);
  Result<GgufValue> read_array(const std::string& key, int depth);
  Status read_metadata(uint64_t count, GgufFile& file);
  Result<GgufTensorInfo> read_tensor_info(size_t index);
  Status check_tensors(GgufFile& file);

  std::string_view bytes_;
  const std::string& name_;
  uint64_t pos_ = 0;
  uint64_t array_elements_ = 0;
};

Result<GgufValue> Parser::read_value(GgufValueType type, const std::string& key, int depth) {
  const std::string what = "the value of '" + key.substr(0, 64) + "'";
  auto as_uint = [&](auto r) -> Result<GgufValue> {
    if (!r.ok()) return r.error();
    return GgufValue::of_uint(type, *r);
  };
  auto as_int = [&](auto r) -> Result<GgufValue> {
    if (!r.ok()) return r.error();
    return GgufValue::of_int(type, *r);
  };
  auto as_float = [&](auto r) -> Result<GgufValue> {
    if (!r.ok()) return r.error();
    return GgufValue::of_float(type, *r);
  };
  switch (type) {
    case GgufValueType::kU8:
      return as_uint(read<uint8_t>(what));
    case GgufValueType::kU16:
      return as_uint(read<uint16_t>(what));
    case GgufValueType::kU32:
      return as_uint(read<uint32_t>(what));
    case GgufValueType::kU64:
      return as_uint(read<uint64_t>(what));
    case GgufValueType::kI8:
      return as_int(read<int8_t>(what));
    case GgufValueType::kI16:
      return as_int(read<int16_t>(what));
    case GgufValueType::kI32:
      return as_int(read<int32_t>(what));
    case GgufValueType::kI64:
      return as_int(read<int64_t>(what));
    case GgufValueType::kF32:
      return as_float(read<float>(what));
    case GgufValueType::kF64:
      return as_float(read<double>(what));
    case GgufValueType::kBool: {
      IB_ASSIGN_OR_RETURN(const uint8_t b, read<uint8_t>(what));
      if (b > 1) return corrupt(fmt::format("{} is a bool stored as {}, not 0 or 1", what, b));
      return GgufValue::of_bool(b == 1);
    }
    case GgufValueType::kString: {
      IB_ASSIGN_OR_RETURN(std::string s, read_string(what + " (a string length)"));
      return GgufValue::of_string(std::move(s));
    }
    case GgufValueType::kArray:
      return read_array(key, depth + 1);
  }
  return corrupt(fmt::format("{} has unknown value type {}", what, static_cast<uint32_t>(type)));
}

Result<GgufValue> Parser::read_array(const std::string& key, int depth) {
  const std::string what = "the array '" + key.substr(0, 64) + "'";
  if (depth > kMaxArrayDepth) {
    return corrupt(fmt::format("{} nests arrays more than {} deep", what, kMaxArrayDepth));
  }
  IB_ASSIGN_OR_RETURN(const uint32_t type_id, read<uint32_t>(what + " (its element type)"));
  if (!is_value_type(type_id)) {
    return corrupt(fmt::format("{} has unknown element type {}", what, type_id));
  }
  const auto element_type = static_cast<GgufValueType>(type_id);
  IB_ASSIGN_OR_RETURN(const uint64_t n, read_count(what + "'s length", scalar_bytes(element_type)));
  std::vector<GgufValue> items;
  array_elements_ += n;  // n <= the file size, so no overflow
  if (array_elements_ > kMaxArrayElements) {
    return corrupt(fmt::format("metadata arrays hold more than {} elements in all ({} has {})",
                               kMaxArrayElements, what, n));
  }
  items.reserve(std::min(n, kMaxReserve));
  for (uint64_t i = 0; i < n; ++i) {
    IB_ASSIGN_OR_RETURN(GgufValue v, read_value(element_type, key, depth));
    items.push_back(std::move(v));
  }
  return GgufValue::of_array(element_type, std::move(items));
}

Status Parser::read_metadata(uint64_t count, GgufFile& file) {
  std::set<std::string, std::less<>> seen;
  file.metadata.reserve(std::min(count, kMaxReserve));
  for (uint64_t i = 0; i < count; ++i) {
    IB_ASSIGN_OR_RETURN(std::string key, read_string(fmt::format("metadata key {}", i)));
    IB_ASSIGN_OR_RETURN(const uint32_t type_id, read<uint32_t>("a metadata value type"));
    if (!is_value_type(type_id)) {
      return corrupt(
          fmt::format("metadata '{}' has unknown value type {}", key.substr(0, 64), type_id));
    }
    IB_ASSIGN_OR_RETURN(GgufValue value,
                        read_value(static_cast<GgufValueType>(type_id), key, /*depth=*/0));
    if (!seen.insert(key).second) {
      return corrupt(fmt::format("metadata key '{}' appears twice", key.substr(0, 64)));
    }
    file.metadata.push_back(GgufMetadata{std::move(key), std::move(value)});
  }
  return Ok{};
}

Result<GgufTensorInfo> Parser::read_tensor_info(size_t index) {
  GgufTensorInfo t;
  IB_ASSIGN_OR_RETURN(t.name, read_string(fmt::format("the name of tensor {}", index)));
  const std::string what = "tensor '" + t.name.substr(0, 96) + "'";
  IB_ASSIGN_OR_RETURN(const uint32_t n_dims, read<uint32_t>(what + " (its n_dims)"));
  if (n_dims == 0 || n_dims > kMaxDims) {
    return corrupt(
        fmt::format("{} has {} dimensions; ggml allows 1 to {}", what, n_dims, kMaxDims));
  }
  uint64_t numel = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    IB_ASSIGN_OR_RETURN(const uint64_t ne, read<uint64_t>(what + " (its dimensions)"));
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (ne != 0 && numel > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne)) {
      return corrupt(fmt::format("{} has dimension {} = {}: too large", what, d, ne));
    }
    numel *= ne;
    t.dims.push_back(static_cast<int64_t>(ne));
  }
  IB_ASSIGN_OR_RETURN(const uint32_t type_id, read<uint32_t>(what + " (its type)"));
  const auto type = ggml_type_of_id(type_id);
  if (!type) {
    const std::string_view known = ggml_type_id_name(type_id);
    const std::string type_name = known.empty() ? fmt::format("unknown ggml type {}", type_id)
                                                : fmt::format("ggml type {} ({})", known, type_id);
    return user_error(fmt::format(
        "{}: {} has {}, which inferbench cannot read (it reads F32, F16, BF16, Q8_0, Q4_0, "
        "Q4_K, Q5_K and Q6_K); convert the model with one of those types",
        name_, what, type_name));
  }
  t.type = *type;
  const GgmlTypeInfo& info = ggml_type_info(t.type);
  if (t.dims[0] % info.block_elems != 0) {
    return user_error(fmt::format(
        "{}: {} has {} elements per row (ne[0]), not a multiple of the {}-element blocks of "
        "{}; the file is corrupt",
        name_, what, t.dims[0], info.block_elems, info.name));
  }
  const uint64_t blocks = numel / static_cast<uint64_t>(info.block_elems);
  if (blocks > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(info.block_bytes)) {
    return corrupt(fmt::format("{} is too large", what));
  }
  t.size_bytes = blocks * static_cast<uint64_t>(info.block_bytes);
  IB_ASSIGN_OR_RETURN(t.offset, read<uint64_t>(what + " (its offset)"));
  return t;
}

Status Parser::check_tensors(GgufFile& file) {
  const uint64_t data_bytes = bytes_.size() - file.data_offset;
  for (const GgufTensorInfo& t : file.tensors) {
    const std::string what = "tensor '" + t.name.substr(0, 96) + "'";
    if (t.offset % file.alignment != 0) {
      return corrupt(fmt::format("{} starts at data offset {}, not a multiple of the alignment {}",
                                 what, t.offset, file.alignment));
    }
    if (t.offset > data_bytes || t.size_bytes > data_bytes - t.offset) {
      return corrupt(
          fmt::format("{} ({} bytes at data offset {}) lies outside the {}-byte data "
                      "section",
                      what, t.size_bytes, t.offset, data_bytes));
    }
  }
  return Ok{};
}

Result<GgufFile> Parser::parse() {
  IB_ASSIGN_OR_RETURN(const uint32_t magic, read<uint32_t>("the magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) {
    return user_error(fmt::format("{}: not a GGUF file (it does not start with \"GGUF\")", name_));
  }
  GgufFile file;
  IB_ASSIGN_OR_RETURN(file.version, read<uint32_t>("the version"));
  if (file.version != kGgufVersion) {
    const std::string why =
        file.version == 1 || file.version == 2
            ? fmt::format(
                  "GGUF version {} is not supported; inferbench reads version 3 "
                  "(re-convert the model with a current llama.cpp)",
                  file.version)
            : fmt::format(
                  "unknown GGUF version {} (a big-endian file, or corrupt); inferbench "
                  "reads little-endian version 3",
                  file.version);
    return user_error(name_ + ": " + why);
  }
  IB_ASSIGN_OR_RETURN(const uint64_t n_tensors, read<uint64_t>("the tensor count"));
  IB_ASSIGN_OR_RETURN(const uint64_t n_metadata, read_count("the metadata count", kMinMetadata));
  if (n_tensors > left() / kMinTensorInfo) {
    return corrupt(fmt::format("the tensor count {} is more than the file can hold", n_tensors));
  }
  IB_TRY(read_metadata(n_metadata, file));
  if (const GgufValue* a = file.find("general.alignment")) {
    const auto n = a->as_int();
    if (a->type != GgufValueType::kU32 || !n || *n == 0 || (*n & (*n - 1)) != 0) {
      return corrupt("general.alignment must be a uint32 power of two");
    }
    file.alignment = static_cast<uint64_t>(*n);
  }
  std::set<std::string, std::less<>> names;
  file.tensors.reserve(std::min(n_tensors, kMaxReserve));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    IB_ASSIGN_OR_RETURN(GgufTensorInfo t, read_tensor_info(i));
    if (!names.insert(t.name).second) {
      return corrupt(fmt::format("tensor '{}' appears twice", t.name.substr(0, 96)));
    }
    file.tensors.push_back(std::move(t));
  }
  // The data section starts at the next multiple of the alignment (pos_ <= size, so no overflow).
  const uint64_t padded = (pos_ + file.alignment - 1) / file.alignment * file.alignment;
  if (padded > bytes_.size()) {
    if (!file.tensors.empty()) return truncated("the padding before the tensor data");
    file.data_offset = bytes_.size();
    return file;
  }
  file.data_offset = padded;
  IB_TRY(check_tensors(file));
  return file;
}

class MappedGguf final : public GgufModelFile {
 public:
  MappedGguf(detail::MappedFile mapped, GgufFile file)
      : mapped_(std::move(mapped)), file_(std::move(file)) {}
  const GgufFile& file() const override { return file_; }
  const std::string& path() const override { return mapped_.path(); }
  std::string_view tensor_bytes(const GgufTensorInfo& tensor) const override {
    return mapped_.bytes().substr(file_.data_offset + tensor.offset, tensor.size_bytes);
  }

 private:
  detail::MappedFile mapped_;
  GgufFile file_;
};

}  // namespace

Result<GgufFile> parse_gguf(std::string_view file_bytes, const std::string& file_name) {
  return Parser(file_bytes, file_name).parse();
}

Result<std::unique_ptr<GgufModelFile>> GgufModelFile::open(const std::string& path) {
  IB_ASSIGN_OR_RETURN(detail::MappedFile mapped, detail::MappedFile::open(path));
  IB_ASSIGN_OR_RETURN(GgufFile file, parse_gguf(mapped.bytes(), path));
  return std::unique_ptr<GgufModelFile>(
      std::make_unique<MappedGguf>(std::move(mapped), std::move(file)));
}

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::memcmp(magic, "GGUF", 4) == 0;
}

}  // namespace ib
