// Front door of report/: the results model of one benchmark and the sinks that write it
// (result.json, requests.jsonl, summary.csv, the Markdown table on stdout), plus the result
// directory rules. Every sink is a plugin ("json", "jsonl", "csv", "markdown").
//
// Call order for a sink: begin() once, on_record() for each request as it finishes (runner
// thread), finish() once at the end (also after an interruption, with what completed).
#pragma once

#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "report/memory_report.h"  // IWYU pragma: export
#include "report/result_dir.h"     // IWYU pragma: export
#include "runner/runner.h"

namespace ib {

struct BenchmarkReport {
  // Header (vLLM `bench serve` names).
  std::string date;  // UTC, "%Y%m%d-%H%M%S" as vLLM writes it
  std::string backend;
  std::string model_id;
  int num_prompts = 0;
  double request_rate = std::numeric_limits<double>::infinity();
  double burstiness = 1.0;
  std::optional<int> max_concurrency;
  int num_warmups = 0;
  int runs_requested = 0;
  std::string load_description;  // e.g. "static batches of 8", for the table's title
  bool interrupted = false;

  MetricsOptions metrics_options;
  std::vector<std::string> percentile_metrics = {"ttft", "tpot", "itl"};  // shown on stdout

  // Results.
  std::vector<RunMetrics> runs;  // completed runs
  std::vector<std::vector<MetricValue>> runs_flat;
  std::optional<RunMetrics> partial_run;   // the interrupted run, over what finished
  std::vector<AggregateMetric> aggregate;  // across completed runs
  // LoRA benchmarks (requests that asked for adapters): the same metrics over each adapter's
  // requests ("base" for those that asked for none), aggregated across runs; empty otherwise.
  // Throughputs are over the span of that adapter's own requests.
  struct AdapterMetrics {
    std::string adapter;
    int64_t requests = 0;  // over the completed runs
    std::vector<AggregateMetric> aggregate;
  };
  std::vector<AdapterMetrics> per_adapter;

  // Our sections, filled by the caller.
  nlohmann::json config = nlohmann::json::object();
  nlohmann::json env = nlohmann::json::object();
  // The backend's kernel switches, as kernel_switches_json() writes them (backend/).
  nlohmann::json kernel_switches = nlohmann::json::object();
  nlohmann::json engine = nlohmann::json::object();
  nlohmann::json memory = nlohmann::json::object();
  nlohmann::json energy = nlohmann::json::object();
  std::string weights;
  std::vector<std::string> footnotes;  // lines printed under the Markdown table
};

// Computes per-run metrics and the aggregate from the runner's records.
void add_results(BenchmarkReport& report, const BenchmarkRecords& records);

// The metric definitions of docs/metrics.md, echoed into result.json.
nlohmann::json metric_definitions();

// Formatters (pure; golden-tested).
nlohmann::ordered_json result_json(const BenchmarkReport& report);  // keys in vLLM's order
std::string summary_csv(const BenchmarkReport& report);
std::string markdown_summary(const BenchmarkReport& report);
// One requests.jsonl line (no newline); times relative to origin_ns.
std::string request_json_line(const RequestRecord& record, int64_t origin_ns);
// The record a requests.jsonl line holds, its times moved back onto the clock by origin_ns (the
// inverse of request_json_line). A malformed line is a runtime error naming the bad field.
Result<RequestRecord> parse_request_json_line(const std::string& line, int64_t origin_ns);

struct SinkContext {
  std::filesystem::path result_dir;
  std::ostream* out = nullptr;  // stdout for the Markdown table
  int64_t origin_ns = 0;        // the benchmark's time zero on the one clock
};

class ReportSink {
 public:
  virtual ~ReportSink() = default;
  virtual std::string name() const = 0;
  virtual Status begin(const SinkContext& context) = 0;
  virtual Status on_record(const RequestRecord&) { return Ok{}; }
  virtual Status finish(const BenchmarkReport& report) = 0;
};
using ReportSinkFactory = std::function<std::unique_ptr<ReportSink>()>;

std::unique_ptr<ReportSink> make_json_sink();      // result.json, written atomically at the end
std::unique_ptr<ReportSink> make_jsonl_sink();     // requests.jsonl, appended and flushed
std::unique_ptr<ReportSink> make_csv_sink();       // summary.csv
std::unique_ptr<ReportSink> make_markdown_sink();  // the table on stdout

}  // namespace ib
