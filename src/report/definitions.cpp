// The metric definitions of docs/metrics.md, echoed into every result.json.
#include <algorithm>

#include "report/report.h"

namespace ib {

nlohmann::json metric_definitions() {
  return nlohmann::json{
      {"clock",
       "one monotonic clock (steady_clock), ns internally, reported in ms; times in "
       "requests.jsonl are ns since the benchmark's start"},
      {"t_sched", "scheduled arrival (open loop) or the moment the runner decided to send"},
      {"t_send", "just before the request is handed to the target"},
      {"t_first", "arrival of the first content token"},
      {"t_k",
       "arrival of token k; a chunk of n tokens is split evenly over the gap since the "
       "previous chunk (tokens of the first chunk share its time)"},
      {"t_end", "arrival of the last token"},
      {"ttft", "t_first - t_send"},
      {"client_queue_time", "t_send - t_sched (client-side queueing)"},
      {"itl", "every gap t_k - t_(k-1), k >= 2, pooled over all requests"},
      {"tpot", "(t_end - t_first) / (N_out - 1) for N_out > 1 (vLLM's definition)"},
      {"e2el", "t_end - t_send"},
      {"e2el_including_client_queue", "e2el + client_queue_time"},
      {"n_in_n_out", "token counts as the target reports them (exact for the embedded engine)"},
      {"duration", "first t_send to last t_end of a run, s"},
      {"request_throughput", "completed / duration"},
      {"output_throughput", "sum of N_out / duration"},
      {"total_token_throughput", "(sum of N_in + sum of N_out) / duration"},
      {"request_goodput", "requests meeting every --goodput SLO (TPOT 0 when N_out <= 1), per s"},
      {"per_sequence_decode_rate", "1000 / mean TPOT: tokens/s seen by one sequence"},
      {"statistics",
       "over completed requests; percentiles by linear interpolation between "
       "closest ranks (numpy's default); std is the population std"},
      {"across_runs",
       "top-level values are the median over completed runs; spread gives "
       "median, min, max and, for 5 or more runs, a bootstrap 95% CI"},
      {"visual_tokens",
       "a vision-language request's prompt tokens that are images' (the engine's count)"},
      {"encode",
       "a request's images' wall time in the vision encoder (each encoder batch counts "
       "in full for every request with an image in it)"},
      {"ttft_queue", "t_scheduled - t_send: until the engine's first step on the request began"},
      {"ttft_prefill", "t_first - t_scheduled - encode: the prefill's share of TTFT"},
      {"kv_bytes",
       "KV cache bytes of a request's tokens (prompt and output) at its end; visual_kv_bytes: "
       "of its visual tokens"},
      {"peak_rss", "max over samples of the process's resident set, and the kernel's VmHWM"},
  };
}

namespace {

// BenchmarkReport::per_adapter: each adapter's requests of every completed run, as a run of
// their own, aggregated across runs.
void add_adapter_results(BenchmarkReport& report, const BenchmarkRecords& records) {
  std::vector<std::string> adapters;  // in order of first appearance
  for (const auto& run : records.runs) {
    for (const RequestRecord& r : run) {
      const std::string name = r.lora_name.empty() ? "base" : r.lora_name;
      if (std::find(adapters.begin(), adapters.end(), name) == adapters.end()) {
        adapters.push_back(name);
      }
    }
  }
  if (adapters.size() == 1 && adapters[0] == "base") return;  // no LoRA in this benchmark
  for (const std::string& adapter : adapters) {
    BenchmarkReport::AdapterMetrics m;
    m.adapter = adapter;
    std::vector<std::vector<MetricValue>> flat;
    for (const auto& run : records.runs) {
      std::vector<RequestRecord> mine;
      for (const RequestRecord& r : run) {
        if ((r.lora_name.empty() ? "base" : r.lora_name) == adapter) mine.push_back(r);
      }
      m.requests += static_cast<int64_t>(mine.size());
      flat.push_back(flatten_metrics(compute_run_metrics(mine, report.metrics_options),
                                     report.metrics_options.percentiles));
    }
    m.aggregate = aggregate_runs(flat);
    report.per_adapter.push_back(std::move(m));
  }
}

}  // namespace

void add_results(BenchmarkReport& report, const BenchmarkRecords& records) {
  report.interrupted = records.interrupted;
  const auto& percentiles = report.metrics_options.percentiles;
  for (const auto& run : records.runs) {
    report.runs.push_back(compute_run_metrics(run, report.metrics_options));
    report.runs_flat.push_back(flatten_metrics(report.runs.back(), percentiles));
  }
  if (!records.partial_run.empty()) {
    report.partial_run = compute_run_metrics(records.partial_run, report.metrics_options);
  }
  report.aggregate = aggregate_runs(report.runs_flat);
  add_adapter_results(report, records);
}

}  // namespace ib
