// A server request's spans (--otlp-endpoint): the request span (kind SERVER, a child of the
// caller's traceparent when it sent one) and its queue, prefill, decode and detokenize children,
// with OpenTelemetry's gen_ai attributes and vLLM's gen_ai.latency.* names. I/O thread only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "trace/trace.h"

namespace ib::detail {

// Times on the one monotonic clock; 0 where the request never got there.
struct RequestTiming {
  std::optional<TraceContext> parent;  // the caller's traceparent
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
  int64_t detokenize_first_ns = 0;  // the first token's text began
  int64_t detokenize_last_ns = 0;   // the last token's text was done
  int64_t detokenize_busy_ns = 0;   // summed time in the detokenizer
  int64_t end_ns = 0;               // the response's last bytes were queued
  std::string finish_reason;        // "length", "stop", "abort", "error"
  std::string error;                // non-empty: the request failed (status ERROR)
  int http_status = 200;            // what the client was sent; 0: nothing (it went away first)
  bool submitted = false;  // the generator took it (else: refused while parsing or checking)
};

// Builds the spans and hands them to the tracer (which samples them at this, their end).
void trace_request(Tracer& tracer, const RequestTiming& timing);

}  // namespace ib::detail
