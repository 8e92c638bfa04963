// Internal to targets/: the engine's step profile as the "performance" section of result.json's
// engine description: achieved bandwidth (bytes a step must move / its time) against the
// backend's measured copy ceiling and the reference ceiling of docs/performance.md.
#pragma once

#include <nlohmann/json.hpp>

#include "engine/engine.h"

namespace ib {

// The H200's device-to-device copy bandwidth measured with PyTorch (docs/performance.md).
inline constexpr double kReferenceCopyBytesPerS = 4.16e12;

nlohmann::json profile_json(const EngineProfile& profile);

}  // namespace ib
