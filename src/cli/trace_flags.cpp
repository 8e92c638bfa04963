// The shared tracing flags (trace_flags.h).
#include "cli/trace_flags.h"

#include <fmt/format.h>

namespace ib {

void add_trace_flags(CLI::App& app, TraceFlags& f) {
  app.add_option("--otlp-endpoint,--otlp-traces-endpoint", f.otlp_endpoint,
                 "export request spans over OTLP/HTTP (protobuf) to this collector, e.g. "
                 "http://127.0.0.1:4318 (/v1/traces is added to a URL without a path); an "
                 "unreachable collector drops and counts spans, it never stops the work");
  app.add_option("--trace-sample-ratio", f.trace_sample_ratio,
                 "share of requests traced, decided by trace id (client and server agree); "
                 "failed requests and those slower than --trace-slow-ms are always traced")
      ->capture_default_str();
  app.add_option("--trace-slow-ms", f.trace_slow_ms,
                 "always trace requests that take at least this many ms (default: no such rule)")
      ->check(CLI::NonNegativeNumber);
}

Result<TraceOptions> trace_options_from(const TraceFlags& f, const std::string& service_name) {
  TraceOptions o;
  o.endpoint = f.otlp_endpoint;
  o.sample_ratio = f.trace_sample_ratio;
  o.slow_ms = f.trace_slow_ms;
  o.service_name = service_name;
  const bool sampling_given = f.trace_sample_ratio != 1.0 || f.trace_slow_ms >= 0;
  if (o.endpoint.empty() && sampling_given) {
    return user_error(
        "--trace-sample-ratio and --trace-slow-ms need --otlp-endpoint URL (where spans go)");
  }
  IB_TRY(validate_trace_options(o));
  return o;
}

}  // namespace ib
