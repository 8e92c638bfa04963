// Front door of telemetry/: collectors sampled on the one clock (process RSS, the engine's memory
// pools), the sampler thread, and the environment fingerprint.
#pragma once

#include "telemetry/collector.h"  // IWYU pragma: export
#include "telemetry/env.h"        // IWYU pragma: export
#include "telemetry/sampler.h"    // IWYU pragma: export
