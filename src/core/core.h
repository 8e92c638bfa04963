// Front door of core/: Result, assertions, the one clock, seeded RNG, statistics, thread pool,
// plugin registry, build info and atomic file writes.
#pragma once

#include "core/assert.h"      // IWYU pragma: export
#include "core/build_info.h"  // IWYU pragma: export
#include "core/clock.h"       // IWYU pragma: export
#include "core/dtype.h"       // IWYU pragma: export
#include "core/fs.h"          // IWYU pragma: export
#include "core/plugin_registry.h"  // IWYU pragma: export
#include "core/result.h"      // IWYU pragma: export
#include "core/rng.h"         // IWYU pragma: export
#include "core/stats.h"       // IWYU pragma: export
#include "core/thread_pool.h"  // IWYU pragma: export
