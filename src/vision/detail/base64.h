// Strict base64 (RFC 4648's standard alphabet, '=' padding required), as vLLM decodes data URLs
// (pybase64.b64decode(..., validate=True)); private to vision/.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace ib::detail {

// The bytes, or a user error naming the first offending offset.
Result<std::vector<uint8_t>> decode_base64(std::string_view text);

}  // namespace ib::detail
