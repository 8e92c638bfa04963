// Fuzzes the GGUF parser: arbitrary bytes as a whole file (the path GgufModelFile::open takes on a
// mapped file). Parsing must never crash; whatever it accepts must describe tensors inside the
// data section, and the config, tensor-name and tokenizer mappings and the block decoders must
// then run on it without crashing either.
#include <cstdint>
#include <string_view>
#include <vector>

#include "core/assert.h"
#include "model/gguf.h"

namespace {

constexpr int64_t kMaxDequantizedElements = 1 << 16;

void check_accepted(const ib::GgufFile& file, std::string_view bytes) {
  IB_ASSERT(file.data_offset <= bytes.size(), "data section starts past the end of the file");
  IB_ASSERT(file.alignment != 0 && (file.alignment & (file.alignment - 1)) == 0,
            "accepted an alignment that is not a power of two");
  const uint64_t data_bytes = bytes.size() - file.data_offset;
  for (const ib::GgufTensorInfo& t : file.tensors) {
    IB_ASSERT(t.offset <= data_bytes && t.size_bytes <= data_bytes - t.offset,
              "accepted a tensor outside the data section");
    const ib::GgmlTypeInfo& info = ib::ggml_type_info(t.type);
    IB_ASSERT(!t.dims.empty() && t.dims[0] % info.block_elems == 0,
              "accepted a row that is not whole blocks");
    IB_ASSERT(static_cast<uint64_t>(t.numel()) / static_cast<uint64_t>(info.block_elems) *
                      static_cast<uint64_t>(info.block_bytes) ==
                  t.size_bytes,
              "accepted a size that does not match the shape");
    (void)ib::map_gguf_tensor(t.name, "llama");
    if (t.numel() <= kMaxDequantizedElements) {
      std::vector<float> out(static_cast<size_t>(t.numel()));
      const auto status =
          ib::dequantize_ggml(t.type, bytes.substr(file.data_offset + t.offset, t.size_bytes), out);
      IB_ASSERT(status.ok(), "an accepted tensor did not dequantize");
    }
  }
  (void)ib::gguf_model_config(file, "fuzz.gguf");
  (void)ib::gguf_tokenizer(file, "fuzz.gguf");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto file = ib::parse_gguf(bytes, "fuzz.gguf");
  if (file.ok()) check_accepted(*file, bytes);
  return 0;
}
