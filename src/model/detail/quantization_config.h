// Private to model/: reads config.json's quantization_config into CheckpointQuantization.
#pragma once

#include "model/config.h"
#include "model/detail/json_fields.h"

namespace ib::detail {

// Absent: a dense checkpoint. A format the engine cannot load: a user error naming
// quant_method (or the scheme) and what is supported.
Status read_quantization_config(const JsonFields& config, CheckpointQuantization& out);

}  // namespace ib::detail
