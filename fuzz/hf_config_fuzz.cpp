// Fuzzes the config.json reader: arbitrary bytes must give a config or an error, never a crash;
// an accepted config must be valid and its derived sizes computable without overflow.
#include <cstdint>
#include <string_view>

#include "core/assert.h"
#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  const auto config = ib::parse_hf_config(json, "fuzz");
  if (!config.ok()) {
    IB_ASSERT(!config.error().message.empty(), "an error without a message");
    return 0;
  }
  IB_ASSERT(config->validate().ok(), "accepted an invalid config");
  IB_ASSERT(config->parameter_count() > 0, "non-positive parameter count");
  IB_ASSERT(config->decode_streamed_parameter_count() > 0, "non-positive streamed count");
  IB_ASSERT(config->kv_bytes_per_token(ib::DType::kBF16) > 0, "non-positive KV bytes");
  (void)config->unsupported_features();
  return 0;
}
