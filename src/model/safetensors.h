// Safetensors checkpoints: one file or a sharded set (model.safetensors.index.json), memory-mapped.
// Format: 8-byte little-endian header length N, N bytes of JSON
// {"name": {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {..}},
// then the raw tensor bytes (offsets relative to the end of the header).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/ggml_blocks.h"
#include "core/result.h"

namespace ib {

struct SafetensorsEntry {
  DType dtype = DType::kF32;  // BF16, F16, F32 (others are refused with the dtype named)
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets within the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  std::map<std::string, SafetensorsEntry> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses and validates the JSON header against the size of the data section that follows it:
// known dtypes, non-negative shapes, end - begin == numel * dtype size, offsets inside the data.
// Never crashes on malformed input (fuzzed: fuzz/safetensors_header_fuzz.cpp).
Result<SafetensorsHeader> parse_safetensors_header(std::string_view json, uint64_t data_bytes);

// A whole safetensors file held in memory (mapped or read): the 8-byte header length is checked
// against the file size (and the 100 MB limit of the format) before the header is parsed.
// file_name prefixes every error. Never crashes on malformed input (fuzzed too).
struct SafetensorsFile {
  SafetensorsHeader header;
  uint64_t data_offset = 0;  // 8 + header length: where the data section starts in the file
};
Result<SafetensorsFile> parse_safetensors_file(std::string_view file_bytes,
                                               const std::string& file_name);

// A tensor inside a mapped file: a host pointer valid while the checkpoint lives. Files written by
// write_safetensors (and by the HF library) start the data section 8-byte aligned; a pointer into
// an arbitrary file may be unaligned, so readers copy elements with memcpy.
// "[4096, 128]"
std::string shape_string(const std::vector<int64_t>& shape);

struct HostTensorRef {
  const void* data = nullptr;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  int64_t numel() const;
};

// One or more mapped safetensors files addressed by HF tensor name.
// A matrix's rows as stored in a ggml block type (core/ggml_blocks.h): shape (rows, cols) in HF's
// order, bytes rows * gguf row bytes, a view valid while the checkpoint lives.
struct GgmlBlockRows {
  GgmlType type = GgmlType::kF32;
  std::vector<int64_t> shape;
  std::string_view bytes;
};

class SafetensorsCheckpoint {
 public:
  virtual ~SafetensorsCheckpoint() = default;
  // Opens a directory (model.safetensors, or model.safetensors.index.json and its shards) or a
  // single .safetensors file. Errors name the file and what is wrong with it.
  static Result<std::unique_ptr<SafetensorsCheckpoint>> open(const std::string& path);

  virtual bool contains(const std::string& name) const = 0;
  virtual Result<HostTensorRef> get(const std::string& name) const = 0;
  virtual std::vector<std::string> names() const = 0;
  virtual std::vector<std::string> files() const = 0;
  // A tensor a GGUF file stores in one of ggml's block types, rows in HF order; nullopt for
  // float tensors and for other checkpoints (whose tensors get() returns).
  virtual std::optional<GgmlBlockRows> ggml_rows(const std::string& /*name*/) const {
    return std::nullopt;
  }
};

// True if path is a directory holding safetensors weights (or is a .safetensors file).
bool has_safetensors(const std::string& path);

// Writes tensors (any DType, data given as raw bytes) as one safetensors file; used by tests
// and to export dummy weights. Written atomically (temporary sibling, then rename); the header is
// padded with spaces so the data section starts 8-byte aligned. Tensors are laid out in order.
struct SafetensorsWriteTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string bytes;  // numel * dtype_size bytes
};
Status write_safetensors(const std::string& path,
                         const std::vector<SafetensorsWriteTensor>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace ib
