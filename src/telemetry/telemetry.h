// Front door of telemetry/: collectors sampled on the one clock (process RSS, the engine's memory
// pools, NVML), the sampler thread and its timeline with phase markers, allocation-trace
// analysis (block map, fragmentation), energy, and the environment fingerprint.
#pragma once

#include "telemetry/allocation_map.h"  // IWYU pragma: export
#include "telemetry/collector.h"       // IWYU pragma: export
#include "telemetry/energy.h"          // IWYU pragma: export
#include "telemetry/env.h"             // IWYU pragma: export
#include "telemetry/sampler.h"         // IWYU pragma: export
#include "telemetry/timeline.h"        // IWYU pragma: export
