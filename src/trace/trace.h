// Front door of trace/: request spans exported over OTLP/HTTP (protobuf) to a collector, with
// W3C trace-context propagation and tail sampling (the keep decision is made when a request
// ends: its trace id against the ratio, always for failures and slow requests).
//
// Threading: a Tracer may be called from any thread. finish_request() never blocks on I/O: spans
// go into a bounded queue that one exporter thread (the Tracer's own) drains; spans that find the
// queue full, or whose export fails (an unreachable endpoint), are dropped and counted.
// shutdown() (the destructor calls it) exports what is queued within the export timeout, drops
// and counts the rest, and joins the thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/result.h"

namespace ib {

using TraceId = std::array<uint8_t, 16>;
using SpanId = std::array<uint8_t, 8>;

// A W3C trace context: the trace and the caller's span (the parent of the callee's spans).
struct TraceContext {
  TraceId trace_id{};
  SpanId span_id{};
  bool sampled = true;  // the traceparent's sampled flag
};

// "00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"; nullopt when malformed, or when either
// id is all zeros (W3C: such a header is ignored and a new trace starts).
std::optional<TraceContext> parse_traceparent(std::string_view header);
std::string format_traceparent(const TraceContext& context);
std::string to_hex(const uint8_t* bytes, size_t n);

enum class SpanKind { kInternal = 1, kServer = 2, kClient = 3 };

struct SpanAttribute {
  std::string key;
  std::variant<std::string, int64_t, double, bool, std::vector<std::string>> value;
};

struct Span {
  TraceId trace_id{};
  SpanId span_id{};
  SpanId parent_span_id{};  // all zeros: a root span
  std::string name;
  SpanKind kind = SpanKind::kInternal;
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  std::vector<SpanAttribute> attributes;
  bool error = false;          // OTLP status ERROR (else UNSET)
  std::string status_message;  // with error
};

// The OTLP ExportTraceServiceRequest (protobuf, as POST /v1/traces takes it) of spans from one
// resource (service.name = service_name) and the "inferbench" instrumentation scope.
std::string encode_otlp_traces(const std::vector<Span>& spans, const std::string& service_name);

struct TraceOptions {
  // http://host:port[/path]: a bare host (no path, or "/") gets OTLP's /v1/traces. Empty: off.
  std::string endpoint;
  double sample_ratio =
      1.0;              // share of traces kept, by trace id (the same choice in every process)
  double slow_ms = -1;  // >= 0: requests at least this long are always kept; < 0: off
  std::string service_name = "inferbench";
  size_t max_queue_spans = 4096;  // spans waiting for export; beyond it they are dropped
  double export_timeout_s = 2;    // per POST (connect, send, answer), and for the final flush
};

// Checks the options (the URL's scheme and port, the ratio and the threshold); user errors name
// the flag (--otlp-endpoint, --trace-sample-ratio, --trace-slow-ms) and the fix.
Status validate_trace_options(const TraceOptions& options);

struct TraceStats {
  uint64_t requests_kept = 0;
  uint64_t requests_sampled_out = 0;
  uint64_t spans_exported = 0;               // accepted by the collector (HTTP 2xx)
  uint64_t spans_dropped_queue_full = 0;     // the queue had no room
  uint64_t spans_dropped_export_failed = 0;  // unreachable, timed out, non-2xx, or at shutdown
  std::string last_error;                    // the last export failure, for logs
  uint64_t spans_dropped() const { return spans_dropped_queue_full + spans_dropped_export_failed; }
};

class Tracer {
 public:
  virtual ~Tracer() = default;
  // A fresh trace (random ids) for a request that has no caller's context.
  virtual TraceContext new_trace() = 0;
  virtual SpanId new_span_id() = 0;
  // The wall-clock time of a time on the one monotonic clock (core/clock.h), in Unix ns.
  virtual int64_t unix_ns(int64_t monotonic_ns) const = 0;
  // Tail sampling: kept when failed, when at least slow_ms long, or by the trace id's ratio.
  virtual bool keep(const TraceId& trace_id, bool failed, int64_t duration_ns) const = 0;
  // A request's spans (all of one trace): sampled by keep(), then queued for export or, when
  // the queue lacks room for all of them, dropped and counted. Never blocks on I/O.
  virtual void finish_request(std::vector<Span> spans, bool failed, int64_t duration_ns) = 0;
  virtual TraceStats stats() const = 0;
  // Waits until every span queued before the call was exported or dropped (at most about two
  // export timeouts), so that stats() then accounts for them.
  virtual void flush() = 0;
  // Exports what is queued (within the export timeout), then stops. Idempotent.
  virtual void shutdown() = 0;
};

// One generation request's facts and times, from which trace_request() builds its spans: the
// request span (a child of the caller's traceparent when there is one) and its queue, prefill,
// decode and detokenize children, with OpenTelemetry's gen_ai attributes and vLLM's
// gen_ai.latency.* names. `inferbench serve` fills one per HTTP request, `inferbench run
// --backend native` one per engine request. Times on the one monotonic clock; 0 where the
// request never got there.
struct RequestTiming {
  std::optional<TraceContext> parent;  // the caller's traceparent
  SpanKind kind = SpanKind::kServer;   // serve: SERVER; the engine inside run: INTERNAL
  std::string operation;               // gen_ai.operation.name: "text_completion" or "chat"
  std::string served_model;            // gen_ai.response.model
  std::string requested_model;         // gen_ai.request.model (a LoRA adapter's name)
  std::string adapter;                 // the LoRA adapter applied; empty: the base model
  uint64_t request_id = 0;
  int max_tokens = 0;
  int prompt_tokens = 0;
  int output_tokens = 0;
  int64_t arrival_ns = 0;
  int64_t step_start_ns = 0;  // the first token's step began (prefill)
  int64_t first_token_ns = 0;
  int64_t last_token_ns = 0;
  // Turning tokens into text; all 0 where none is made (run's engine counts tokens only): then
  // the request has no detokenize span.
  int64_t detokenize_first_ns = 0;  // the first token's text began
  int64_t detokenize_last_ns = 0;   // the last token's text was done
  int64_t detokenize_busy_ns = 0;   // summed time in the detokenizer
  int64_t end_ns = 0;               // serve: the response's last bytes were queued
  std::string finish_reason;        // "length", "stop", "abort", "error"
  std::string error;                // non-empty: the request failed (status ERROR)
  int http_status = 0;              // what the client was sent; 0: no HTTP (or it went away)
  bool submitted = false;           // the engine took it (else: refused while parsing or checking)
};

// Builds the request's spans and hands them to the tracer, which samples them at this, their
// end. Call once per request, from any thread.
void trace_request(Tracer& tracer, const RequestTiming& timing);

// Starts the exporter thread. The endpoint is not contacted until spans are queued, so an
// unreachable collector is never an error here (its spans are dropped and counted).
Result<std::unique_ptr<Tracer>> make_tracer(TraceOptions options);

}  // namespace ib
