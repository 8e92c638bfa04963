// What the engine runs of a mixture-of-experts model (Mixtral), for the checks made before any
// weight loads: by the loader (detail::check_moe_runs) and by the command line.
#pragma once

#include "backend/weight.h"
#include "core/result.h"
#include "model/config.h"

namespace ib {

// What no backend runs yet: a user error naming the fix when quantization (the --quantization
// weight format) or the checkpoint's quantization_config would quantize DeepSeek-V2's latent
// attention and experts, or put experts in GGUF blocks; Ok for dense models and dense weights.
// Whether a backend runs experts in a format is detail::check_moe_runs' question (the CPU:
// every format).
Status check_moe_quantization(const ModelConfig& config, WeightFormat quantization);

}  // namespace ib
