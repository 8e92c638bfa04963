// Prometheus text exposition of the server's metrics.
#include "server/detail/prometheus.h"

#include <algorithm>

#include <fmt/format.h>

namespace ib::detail {
namespace {

std::string escape_label(const std::string& v) {
  std::string out;
  for (const char c : v) {
    if (c == '\\' || c == '"') out.push_back('\\');
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out.push_back(c);
  }
  return out;
}

class Writer {
 public:
  explicit Writer(const std::string& model)
      : model_(fmt::format("model_name=\"{}\"", escape_label(model))) {}

  void header(const char* name, const char* type, const char* help) {
    out_ += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  }
  void sample(const std::string& name, double value, const std::string& labels = "") {
    out_ +=
        fmt::format("{}{{{}{}{}}} {}\n", name, model_, labels.empty() ? "" : ",", labels, value);
  }
  void one(const char* name, const char* type, const char* help, double value) {
    header(name, type, help);
    sample(name, value);
  }
  void histogram(const char* name, const char* help, const Histogram& h) {
    header(name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      cumulative += h.counts()[i];
      sample(fmt::format("{}_bucket", name), static_cast<double>(cumulative),
             fmt::format("le=\"{}\"", h.bounds()[i]));
    }
    sample(fmt::format("{}_bucket", name), static_cast<double>(h.count()), "le=\"+Inf\"");
    sample(fmt::format("{}_sum", name), h.sum());
    sample(fmt::format("{}_count", name), static_cast<double>(h.count()));
  }
  std::string take() { return std::move(out_); }

 private:
  std::string model_;
  std::string out_;
};

}  // namespace

std::vector<double> one_two_five(double max) {
  std::vector<double> out;
  for (double decade = 1; decade <= max; decade *= 10) {
    for (const double m : {1.0, 2.0, 5.0}) {
      if (m * decade <= max) out.push_back(m * decade);
    }
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), value);
  ++counts_[static_cast<size_t>(it - bounds_.begin())];
  sum_ += value;
  ++count_;
}

ServerMetrics::ServerMetrics()
    : ttft_s({0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
              10.0, 20.0, 40.0, 80.0}),
      itl_s({0.0005, 0.001, 0.0025, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05,
             0.075,  0.1,   0.15,   0.2,   0.3,  0.4,   0.5,  0.75,  1.0,  2.5}),
      e2e_s({0.01, 0.05, 0.1,  0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,  5.0,
             10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0}),
      decode_s(e2e_s.bounds()),
      queue_s(e2e_s.bounds()),
      prefill_s(e2e_s.bounds()),
      inference_s(e2e_s.bounds()),
      request_max_tokens(one_two_five(1e6)),
      request_prompt_tokens(one_two_five(1e6)),
      request_generation_tokens(one_two_five(1e6)) {}

namespace {

// vLLM's core set under its names and its model_name label (its production metrics as documented
// for v0 and v1), from the same measurements as inferbench's own.
void render_vllm_names(Writer& w, const ServerMetrics& m, const MetricsContext& c) {
  const GeneratorStats& g = c.generator;
  w.one("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
        g.running);
  w.one("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
        g.waiting);
  w.one("vllm:num_requests_swapped", "gauge",
        "Number of requests swapped to CPU (inferbench never swaps: 0).", 0);
  const double usage = g.kv_blocks_total > 0 ? static_cast<double>(g.kv_blocks_used) /
                                                   static_cast<double>(g.kv_blocks_total)
                                             : 0.0;
  w.one("vllm:gpu_cache_usage_perc", "gauge", "GPU KV-cache usage. 1 means 100 percent usage.",
        usage);
  w.one("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", usage);
  w.one("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
        static_cast<double>(m.prompt_tokens));
  w.one("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
        static_cast<double>(m.generation_tokens));
  w.header("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const char* reason : {"stop", "length", "abort"}) {
    const auto it = m.finished.find(reason);
    w.sample("vllm:request_success_total",
             static_cast<double>(it == m.finished.end() ? 0 : it->second),
             fmt::format("finished_reason=\"{}\"", reason));
  }
  w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
              m.ttft_s);
  w.histogram("vllm:time_per_output_token_seconds",
              "Histogram of time per output token in seconds.", m.itl_s);
  w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
              m.itl_s);
  w.histogram("vllm:e2e_request_latency_seconds",
              "Histogram of end to end request latency in seconds.", m.e2e_s);
  w.histogram("vllm:request_decode_time_seconds",
              "Histogram of time spent in DECODE phase for request.", m.decode_s);
  w.histogram("vllm:request_queue_time_seconds",
              "Histogram of time spent in WAITING phase for request.", m.queue_s);
  w.histogram("vllm:request_prefill_time_seconds",
              "Histogram of time spent in PREFILL phase for request.", m.prefill_s);
  w.histogram("vllm:request_inference_time_seconds",
              "Histogram of time spent in RUNNING phase for request.", m.inference_s);
  w.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
              m.request_prompt_tokens);
  w.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
              m.request_generation_tokens);
  // One sequence per request (n = 1): its generation tokens are the request's maximum.
  w.histogram("vllm:request_max_num_generation_tokens",
              "Histogram of maximum number of requested generation tokens.",
              m.request_generation_tokens);
  w.histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
              m.request_max_tokens);
  w.one("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
        static_cast<double>(g.preemptions));
}

}  // namespace

std::string render_prometheus(const ServerMetrics& m, const MetricsContext& c) {
  Writer w(c.model_name);
  const GeneratorStats& g = c.generator;
  w.one("inferbench_requests_running", "gauge", "Requests being generated by the engine.",
        g.running);
  w.one("inferbench_requests_waiting", "gauge", "Requests queued in the engine, not yet running.",
        g.waiting);
  w.one("inferbench_http_streams_open", "gauge",
        "Generation responses the server has not finished sending.", m.open_streams);
  w.one("inferbench_kv_blocks_used", "gauge", "KV-cache blocks held by sequences.",
        g.kv_blocks_used);
  w.one("inferbench_kv_blocks_total", "gauge", "KV-cache blocks in the pool.", g.kv_blocks_total);
  w.header("inferbench_tokens_total", "counter", "Tokens processed, by phase (prefill, decode).");
  w.sample("inferbench_tokens_total", static_cast<double>(m.prompt_tokens), "phase=\"prefill\"");
  w.sample("inferbench_tokens_total", static_cast<double>(m.generation_tokens), "phase=\"decode\"");
  w.header("inferbench_requests_finished_total", "counter",
           "Generation requests finished, by reason (length, stop, abort, error).");
  for (const auto& [reason, n] : m.finished) {
    w.sample("inferbench_requests_finished_total", static_cast<double>(n),
             fmt::format("finished_reason=\"{}\"", reason));
  }
  w.header("inferbench_http_responses_total", "counter", "HTTP responses, by status code.");
  for (const auto& [code, n] : m.responses) {
    w.sample("inferbench_http_responses_total", static_cast<double>(n),
             fmt::format("code=\"{}\"", code));
  }
  w.histogram("inferbench_time_to_first_token_seconds",
              "From request arrival to its first generated token.", m.ttft_s);
  w.histogram("inferbench_inter_token_latency_seconds",
              "Between consecutive generated tokens of a request.", m.itl_s);
  w.histogram("inferbench_e2e_request_latency_seconds", "From request arrival to its last token.",
              m.e2e_s);
  w.header("inferbench_device_memory_bytes", "gauge",
           "The engine's tracked device memory, by kind (allocated, peak, weights, kv_pool).");
  w.sample("inferbench_device_memory_bytes", static_cast<double>(g.device_allocated_bytes),
           "kind=\"allocated\"");
  w.sample("inferbench_device_memory_bytes", static_cast<double>(g.device_peak_allocated_bytes),
           "kind=\"peak\"");
  w.sample("inferbench_device_memory_bytes", static_cast<double>(g.weights_bytes),
           "kind=\"weights\"");
  w.sample("inferbench_device_memory_bytes", static_cast<double>(g.kv_pool_bytes),
           "kind=\"kv_pool\"");
  if (c.energy_joules) {
    w.one("inferbench_energy_joules_total", "counter", "Device energy since the server started.",
          *c.energy_joules);
  }
  if (c.traces) {
    const TraceStats& t = *c.traces;
    w.header("inferbench_trace_requests_total", "counter",
             "Requests whose spans were kept or sampled out (--trace-sample-ratio, "
             "--trace-slow-ms; failures are always kept).");
    w.sample("inferbench_trace_requests_total", static_cast<double>(t.requests_kept),
             "decision=\"kept\"");
    w.sample("inferbench_trace_requests_total", static_cast<double>(t.requests_sampled_out),
             "decision=\"sampled_out\"");
    w.one("inferbench_trace_spans_exported_total", "counter", "Spans the OTLP collector accepted.",
          static_cast<double>(t.spans_exported));
    w.header("inferbench_trace_spans_dropped_total", "counter",
             "Kept spans never exported, by reason (queue_full: the export queue had no room; "
             "export_failed: the collector was unreachable, slow or refused them).");
    w.sample("inferbench_trace_spans_dropped_total",
             static_cast<double>(t.spans_dropped_queue_full), "reason=\"queue_full\"");
    w.sample("inferbench_trace_spans_dropped_total",
             static_cast<double>(t.spans_dropped_export_failed), "reason=\"export_failed\"");
  }
  if (c.vllm_names) render_vllm_names(w, m, c);
  return w.take();
}

}  // namespace ib::detail
