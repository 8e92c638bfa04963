// Internal to targets/: a traced target's "traces" section of result.json's engine description
// (the native and openai targets report the same keys).
#pragma once

#include <nlohmann/json.hpp>

#include "trace/trace.h"

namespace ib {

// Flushes the tracer first, so the spans of requests already done count as exported or dropped.
nlohmann::json traces_json(const TraceOptions& options, Tracer& tracer);

}  // namespace ib
