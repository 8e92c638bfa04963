// The "traces" section of a traced target's description (detail/trace_json.h).
#include "targets/detail/trace_json.h"

namespace ib {

nlohmann::json traces_json(const TraceOptions& options, Tracer& tracer) {
  using nlohmann::json;
  tracer.flush();
  const TraceStats s = tracer.stats();
  return json{{"otlp_endpoint", options.endpoint},
              {"sample_ratio", options.sample_ratio},
              {"slow_ms", options.slow_ms >= 0 ? json(options.slow_ms) : json()},
              {"requests_kept", s.requests_kept},
              {"requests_sampled_out", s.requests_sampled_out},
              {"spans_exported", s.spans_exported},
              {"spans_dropped_queue_full", s.spans_dropped_queue_full},
              {"spans_dropped_export_failed", s.spans_dropped_export_failed},
              {"last_error", s.last_error.empty() ? json() : json(s.last_error)}};
}

}  // namespace ib
