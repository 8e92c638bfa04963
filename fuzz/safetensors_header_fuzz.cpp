// Fuzzes the safetensors parsers: arbitrary bytes as a whole file (length prefix, header, data:
// the path SafetensorsCheckpoint::open takes on a mapped file) and as a bare JSON header. Parsing
// must never crash, and whatever it accepts must describe tensors inside the data section.
#include <cstdint>
#include <string_view>

#include "core/assert.h"
#include "model/safetensors.h"

namespace {

void check_accepted(const ib::SafetensorsHeader& header, uint64_t data_bytes) {
  for (const auto& [name, e] : header.tensors) {
    IB_ASSERT(e.begin <= e.end && e.end <= data_bytes, "accepted tensor outside the data");
    uint64_t numel = 1;
    for (const int64_t d : e.shape) {
      IB_ASSERT(d >= 0, "accepted a negative dimension");
      numel *= static_cast<uint64_t>(d);
    }
    IB_ASSERT(numel * ib::dtype_size(e.dtype) == e.end - e.begin, "accepted a size mismatch");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto file = ib::parse_safetensors_file(bytes, "fuzz.safetensors");
  if (file.ok()) {
    IB_ASSERT(file->data_offset >= 8 && file->data_offset <= size, "data offset outside the file");
    check_accepted(file->header, size - file->data_offset);
  }
  constexpr uint64_t kDataBytes = 4096;
  const auto header = ib::parse_safetensors_header(bytes, kDataBytes);
  if (header.ok()) check_accepted(*header, kDataBytes);
  return 0;
}
