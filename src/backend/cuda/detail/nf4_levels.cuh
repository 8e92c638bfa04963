// bitsandbytes' NF4 levels (backend/weight.h) in constant memory for the kernels, initialised at
// compile time (no upload, so kernels that read them may run inside captured graphs).
#pragma once

#include "backend/weight.h"

namespace ib::cuda {

static __constant__ float kNf4LevelsDevice[16] = {
    kNf4Levels[0],  kNf4Levels[1],  kNf4Levels[2],  kNf4Levels[3], kNf4Levels[4],  kNf4Levels[5],
    kNf4Levels[6],  kNf4Levels[7],  kNf4Levels[8],  kNf4Levels[9], kNf4Levels[10], kNf4Levels[11],
    kNf4Levels[12], kNf4Levels[13], kNf4Levels[14], kNf4Levels[15]};

}  // namespace ib::cuda
