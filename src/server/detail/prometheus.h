// The server's metrics and their Prometheus text exposition (format 0.0.4), in base units
// (seconds, bytes, joules). Updated and rendered on the server's I/O thread only.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "server/generator.h"
#include "trace/trace.h"

namespace ib::detail {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double value);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket, not cumulative
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // bounds_.size() + 1 (the last is +Inf)
  double sum_ = 0;
  uint64_t count_ = 0;
};

// 1, 2, 5, 10, 20, 50, ... up to max: vLLM's buckets for token counts.
std::vector<double> one_two_five(double max);

struct ServerMetrics {
  ServerMetrics();
  Histogram ttft_s;                     // request received -> first token produced
  Histogram itl_s;                      // between consecutive tokens of a request
  Histogram e2e_s;                      // request received -> finished
  Histogram decode_s;                   // a finished request's first token -> its last
  Histogram queue_s;                    // arrival -> the start of its first token's step
  Histogram prefill_s;                  // that step's start -> the first token
  Histogram inference_s;                // that step's start -> the last token (prefill + decode)
  Histogram request_max_tokens;         // per finished request: the max_tokens it asked for
  Histogram request_prompt_tokens;      // per finished request
  Histogram request_generation_tokens;  // per finished request
  uint64_t prompt_tokens = 0;           // prefill phase, counted when a request's first token comes
  uint64_t generation_tokens = 0;       // decode phase
  std::map<std::string, uint64_t> finished;  // by finish reason: length, stop, abort, error
  std::map<int, uint64_t> responses;         // HTTP responses by status code
  int open_streams = 0;                      // generation responses not yet complete
};

struct MetricsContext {
  std::string model_name;
  GeneratorStats generator;
  std::optional<double> energy_joules;  // only where the device reports it
  bool vllm_names = false;              // also vLLM's names (ServerOptions::vllm_metric_names)
  std::optional<TraceStats> traces;     // only when the server exports spans
};

std::string render_prometheus(const ServerMetrics& metrics, const MetricsContext& context);

}  // namespace ib::detail
