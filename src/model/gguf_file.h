// GGUF, llama.cpp's single-file model format (version 3): the reader, the writer, and the values
// of its metadata (part of the gguf.h front door).
//
// Layout (little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata count; metadata
// (string key, u32 value type, value); tensor infos (string name, u32 n_dims, u64 dims[n_dims],
// u32 ggml type, u64 offset); padding to general.alignment (default 32); the data section, each
// tensor at its offset (a multiple of the alignment) from its start. A string is a u64 length and
// that many bytes; an array is a u32 element type, a u64 count and the elements.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/ggml_blocks.h"  // GgmlType
#include "core/result.h"

namespace ib {

enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);  // "uint32", "array", ...

struct GgufValue;
struct GgufArray {
  GgufValueType element_type = GgufValueType::kU8;
  std::vector<GgufValue> items;
};

// One metadata value. Unsigned integers are held as uint64_t, signed ones as int64_t, floats as
// double; type says how the file stores it (the writer checks the value fits).
struct GgufValue {
  GgufValueType type = GgufValueType::kU32;
  std::variant<uint64_t, int64_t, double, bool, std::string, GgufArray> value;

  static GgufValue of_uint(GgufValueType type, uint64_t v) { return {type, v}; }
  static GgufValue of_int(GgufValueType type, int64_t v) { return {type, v}; }
  static GgufValue of_float(GgufValueType type, double v) { return {type, v}; }
  static GgufValue of_bool(bool v) { return {GgufValueType::kBool, v}; }
  static GgufValue of_string(std::string v) { return {GgufValueType::kString, std::move(v)}; }
  static GgufValue of_array(GgufValueType element_type, std::vector<GgufValue> items) {
    return {GgufValueType::kArray, GgufArray{element_type, std::move(items)}};
  }
  static GgufValue of_strings(const std::vector<std::string>& items);

  // Any integer type whose value fits int64_t; otherwise nullopt.
  std::optional<int64_t> as_int() const;
  // Any integer or float type.
  std::optional<double> as_number() const;
  const std::string* as_string() const { return std::get_if<std::string>(&value); }
  const GgufArray* as_array() const { return std::get_if<GgufArray>(&value); }
};

struct GgufMetadata {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;  // ne[0] first: ne[0] is the contiguous row; HF [out, in] is {in, out}
  uint64_t offset = 0;        // from the start of the data section
  uint64_t size_bytes = 0;    // numel / block_elems * block_bytes
  int64_t numel() const;
};

inline constexpr uint32_t kGgufVersion = 3;
inline constexpr uint64_t kGgufDefaultAlignment = 32;

// A parsed file; tensors and metadata in file order.
struct GgufFile {
  uint32_t version = kGgufVersion;
  uint64_t alignment = kGgufDefaultAlignment;  // general.alignment
  std::vector<GgufMetadata> metadata;
  std::vector<GgufTensorInfo> tensors;
  uint64_t data_offset = 0;  // where the data section starts in the file (aligned)

  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;
};

// Parses a whole file held in memory. Every count, size and offset is checked against the file
// size; a truncated or corrupt file, a version other than 3, an unsupported tensor type or a shape
// that is not a whole number of blocks is a user error naming the file and the problem. Never
// crashes on malformed input (fuzzed: fuzz/gguf_fuzz.cpp).
Result<GgufFile> parse_gguf(std::string_view file_bytes, const std::string& file_name);

// A memory-mapped GGUF file: the parsed header and each tensor's bytes, valid while it lives.
class GgufModelFile {
 public:
  virtual ~GgufModelFile() = default;
  static Result<std::unique_ptr<GgufModelFile>> open(const std::string& path);
  virtual const GgufFile& file() const = 0;
  virtual const std::string& path() const = 0;
  // The tensor's size_bytes bytes; the tensor must be one of file().tensors.
  virtual std::string_view tensor_bytes(const GgufTensorInfo& tensor) const = 0;
};

// True when path is a regular file that starts with the GGUF magic (a --model given as a file).
bool is_gguf_file(const std::string& path);

// A tensor to write: bytes in type's block layout (gguf_blocks.h quantizes floats into it).
struct GgufWriteTensor {
  std::string name;
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> dims;  // ne[0] first
  std::string bytes;
};

// Serializes a version-3 file: metadata and tensors in the order given, data aligned to the
// general.alignment entry of metadata when present (a uint32 power of two), else 32. User errors:
// duplicate keys or names, a value that does not fit its type, bytes that do not match a shape.
Result<std::string> serialize_gguf(const std::vector<GgufMetadata>& metadata,
                                   const std::vector<GgufWriteTensor>& tensors);
// serialize_gguf, written atomically (a temporary sibling, then rename).
Status write_gguf(const std::string& path, const std::vector<GgufMetadata>& metadata,
                  const std::vector<GgufWriteTensor>& tensors);

}  // namespace ib
