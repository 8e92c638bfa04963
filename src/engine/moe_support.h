// What the engine runs of a mixture-of-experts model (Mixtral), for the checks made before any
// weight loads: by the loader (detail::check_moe_runs) and by the command line.
#pragma once

#include "backend/weight.h"
#include "core/result.h"
#include "model/config.h"

namespace ib {

// The experts run with dense weights only: a user error naming the fix when quantization (the
// --quantization weight format) or the checkpoint's quantization_config would quantize them; Ok
// for dense models and dense weights.
Status check_moe_quantization(const ModelConfig& config, WeightFormat quantization);

}  // namespace ib
