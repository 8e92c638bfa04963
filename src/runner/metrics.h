// Run-level metrics from request records, exactly as docs/metrics.md defines them, and their
// aggregation across runs (median with min and max; bootstrap CI for 5 or more runs).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "core/stats.h"
#include "runner/records.h"

namespace ib {

// Latency distributions, named as `vllm bench serve` names them in --percentile-metrics.
enum class LatencyMetric { kTtft, kTpot, kItl, kE2el, kQueue, kE2elQueue };
inline constexpr size_t kNumLatencyMetrics = 6;
inline constexpr std::array<std::string_view, kNumLatencyMetrics> kLatencyMetricNames = {
    "ttft", "tpot", "itl", "e2el", "client_queue_time", "e2el_including_client_queue"};

// Service-level objectives for goodput, in ms (--goodput ttft:MS,tpot:MS,e2el:MS).
struct GoodputSlo {
  std::optional<double> ttft_ms;
  std::optional<double> tpot_ms;
  std::optional<double> e2el_ms;
};

struct MetricsOptions {
  std::vector<double> percentiles = {99.0};  // --metric-percentiles
  std::optional<GoodputSlo> goodput;
  bool vision = false;  // the workload holds images: RunMetrics::vision is computed
};

struct LatencyStats {
  size_t count = 0;
  double mean_ms = 0;
  double median_ms = 0;
  double std_ms = 0;                   // population
  std::vector<double> percentiles_ms;  // one per MetricsOptions::percentiles
};

// Vision-language requests (docs/metrics.md), over completed requests: their visual tokens and
// KV bytes, and their TTFT split into the engine's queue, the vision encoder and the prefill
// (requests whose target reported when the engine scheduled them).
struct VisionRunMetrics {
  int64_t total_visual_tokens = 0;
  double mean_visual_tokens = 0;
  LatencyStats encode;              // encode_ns
  LatencyStats ttft_queue;          // t_scheduled - t_send
  LatencyStats ttft_prefill;        // t_first - t_scheduled - encode
  double mean_kv_bytes = 0;         // the KV cache bytes of a request's tokens
  double mean_visual_kv_bytes = 0;  // of its visual tokens
};

struct RunMetrics {
  int completed = 0;
  int failed = 0;
  int64_t total_input_tokens = 0;   // over completed requests
  int64_t total_output_tokens = 0;  // over completed requests
  double duration_s = 0;            // first t_send to last t_end
  double request_throughput = 0;    // completed / duration
  double output_throughput = 0;     // tok/s
  double total_token_throughput = 0;
  std::optional<double> request_goodput;  // only with --goodput
  double per_sequence_decode_tok_s = 0;   // 1000 / mean TPOT
  std::array<LatencyStats, kNumLatencyMetrics> latency;
  std::optional<VisionRunMetrics> vision;  // with MetricsOptions::vision

  const LatencyStats& operator[](LatencyMetric m) const { return latency[static_cast<size_t>(m)]; }
};

RunMetrics compute_run_metrics(std::span<const RequestRecord> records,
                               const MetricsOptions& options);

// One named scalar of a run, with its unit ("s", "req/s", "tok/s", "ms", "" for counts).
struct MetricValue {
  std::string key;    // vLLM result.json name where one exists: "mean_ttft_ms", "duration", ...
  std::string label;  // for tables: "TTFT mean"
  std::string unit;
  double value = 0;
};
// Every scalar of a run in display order: counts and throughputs, then mean/median/std/pXX of
// each latency metric.
std::vector<MetricValue> flatten_metrics(const RunMetrics& metrics,
                                         std::span<const double> percentiles);

// "p99", "p99.9": vLLM's percentile key spelling.
std::string percentile_key(double p);

struct AggregateMetric {
  std::string key;
  std::string label;
  std::string unit;
  std::vector<double> per_run;
  Spread spread;
};
// Aggregates flattened runs (the same keys in the same order) into median/min/max per key.
std::vector<AggregateMetric> aggregate_runs(const std::vector<std::vector<MetricValue>>& runs);

// --goodput "ttft:200,tpot:50"; --percentile-metrics "ttft,tpot,itl"; --metric-percentiles
// "50,90,99". User errors name the flag and the bad item.
Result<GoodputSlo> parse_goodput(std::string_view spec);
Result<std::vector<std::string>> parse_percentile_metrics(std::string_view spec);
Result<std::vector<double>> parse_metric_percentiles(std::string_view spec);

}  // namespace ib
