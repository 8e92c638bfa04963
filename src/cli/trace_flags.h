// The tracing flags `inferbench run` and `inferbench serve` share: declared once, registered by
// add_trace_flags, inherited by RunFlags and ServeFlags.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "core/result.h"
#include "trace/trace.h"

namespace ib {

struct TraceFlags {
  std::string otlp_endpoint;  // also vLLM's --otlp-traces-endpoint
  double trace_sample_ratio = 1.0;
  double trace_slow_ms = -1;  // < 0: not given
};

void add_trace_flags(CLI::App& app, TraceFlags& flags);

// Checked options (an empty endpoint: tracing off); user errors name the flag and the fix.
Result<TraceOptions> trace_options_from(const TraceFlags& flags, const std::string& service_name);

}  // namespace ib
