// A generation request's spans (trace.h: RequestTiming), for serve's HTTP requests and run's
// engine requests alike.
#include "trace/trace.h"

#include <utility>
#include <vector>

#include "core/clock.h"

namespace ib {
namespace {

double seconds(int64_t from_ns, int64_t to_ns) {
  return ns_to_s(to_ns - from_ns);
}

}  // namespace

void trace_request(Tracer& tracer, const RequestTiming& t) {
  const TraceContext root = t.parent ? *t.parent : tracer.new_trace();
  Span request;
  request.trace_id = root.trace_id;
  request.span_id = tracer.new_span_id();
  if (t.parent) request.parent_span_id = t.parent->span_id;
  request.name = t.operation + " " + t.requested_model;  // gen_ai: "{operation} {model}"
  request.kind = t.kind;
  request.start_unix_ns = tracer.unix_ns(t.arrival_ns);
  request.end_unix_ns = tracer.unix_ns(t.end_ns);
  request.error = !t.error.empty();
  request.status_message = t.error;
  auto& a = request.attributes;
  a.push_back({"gen_ai.operation.name", t.operation});
  a.push_back({"gen_ai.request.model", t.requested_model});
  a.push_back({"gen_ai.response.model", t.served_model});
  a.push_back({"gen_ai.request.id", std::to_string(t.request_id)});
  if (!t.adapter.empty()) a.push_back({"inferbench.lora_adapter", t.adapter});
  if (t.http_status > 0) a.push_back({"http.response.status_code", int64_t{t.http_status}});
  if (request.error) a.push_back({"error.type", t.finish_reason});
  if (t.max_tokens > 0) a.push_back({"gen_ai.request.max_tokens", int64_t{t.max_tokens}});
  a.push_back({"gen_ai.usage.input_tokens", int64_t{t.prompt_tokens}});
  a.push_back({"gen_ai.usage.output_tokens", int64_t{t.output_tokens}});
  // vLLM's names for the same counts, so that tooling built on vLLM's spans reads these.
  a.push_back({"gen_ai.usage.prompt_tokens", int64_t{t.prompt_tokens}});
  a.push_back({"gen_ai.usage.completion_tokens", int64_t{t.output_tokens}});
  a.push_back({"gen_ai.response.finish_reasons", std::vector<std::string>{t.finish_reason}});
  a.push_back({"gen_ai.latency.e2e", seconds(t.arrival_ns, t.end_ns)});

  std::vector<Span> spans;
  auto child = [&](const char* name, int64_t start_ns, int64_t end_ns) -> Span& {
    Span s;
    s.trace_id = root.trace_id;
    s.span_id = tracer.new_span_id();
    s.parent_span_id = request.span_id;
    s.name = name;
    s.start_unix_ns = tracer.unix_ns(start_ns);
    s.end_unix_ns = tracer.unix_ns(end_ns);
    spans.push_back(std::move(s));
    return spans.back();
  };
  if (t.first_token_ns > 0) {
    const int64_t prefill_start = t.step_start_ns > 0 ? t.step_start_ns : t.arrival_ns;
    a.push_back({"gen_ai.latency.time_to_first_token", seconds(t.arrival_ns, t.first_token_ns)});
    a.push_back({"gen_ai.latency.time_in_queue", seconds(t.arrival_ns, prefill_start)});
    a.push_back({"gen_ai.latency.time_in_model_prefill", seconds(prefill_start, t.first_token_ns)});
    a.push_back(
        {"gen_ai.latency.time_in_model_decode", seconds(t.first_token_ns, t.last_token_ns)});
    child("queue", t.arrival_ns, prefill_start);
    child("prefill", prefill_start, t.first_token_ns)
        .attributes.push_back({"gen_ai.usage.input_tokens", int64_t{t.prompt_tokens}});
    child("decode", t.first_token_ns, t.last_token_ns)
        .attributes.push_back({"gen_ai.usage.output_tokens", int64_t{t.output_tokens}});
    if (t.detokenize_last_ns > 0) {
      child("detokenize", t.detokenize_first_ns, t.detokenize_last_ns)
          .attributes.push_back({"inferbench.detokenize_busy_ns", t.detokenize_busy_ns});
    }
  } else if (t.submitted) {
    child("queue", t.arrival_ns, t.end_ns);  // submitted, ended before its first token
  }
  spans.insert(spans.begin(), std::move(request));
  tracer.finish_request(std::move(spans), !t.error.empty(), t.end_ns - t.arrival_ns);
}

}  // namespace ib
