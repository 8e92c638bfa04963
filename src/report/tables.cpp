// summary.csv (one row per run plus the median) and the Markdown table printed on stdout.
#include <cmath>

#include <fmt/format.h>

#include "report/report.h"
#include "report/stability.h"

namespace ib {
namespace {

bool is_count(const std::string& unit) {
  return unit.empty();
}

std::string csv_column(const AggregateMetric& a) {
  if (a.unit == "s") return a.key + "_s";
  if (a.unit == "req/s") return a.key + "_req_s";
  if (a.unit == "tok/s") return a.key + "_tok_s";
  return a.key;  // counts, and latencies whose keys already end in _ms
}

std::string csv_value(const AggregateMetric& a, double v) {
  return is_count(a.unit) ? fmt::format("{:g}", v) : fmt::format("{:.4f}", v);
}

std::string md_value(const AggregateMetric& a, double v) {
  return is_count(a.unit) ? fmt::format("{:g}", v) : fmt::format("{:.2f}", v);
}

// Rows of the stdout table: every run-level scalar, and mean / median / percentiles of the
// latency metrics chosen with --percentile-metrics and of the vision ones (runs with images only)
// (std stays in result.json and summary.csv).
bool shown(const AggregateMetric& a, std::vector<std::string> selected) {
  if (a.unit != "ms") return true;
  if (a.key.rfind("std_", 0) == 0) return false;
  selected.insert(selected.end(), {"encode", "ttft_queue", "ttft_prefill"});
  for (const auto& m : selected) {
    const std::string suffix = "_" + m + "_ms";
    if (a.key.size() > suffix.size() &&
        a.key.compare(a.key.size() - suffix.size(), suffix.size(), suffix) == 0) {
      // What precedes the metric must be a bare statistic ("mean", "p99").
      const std::string stat = a.key.substr(0, a.key.size() - suffix.size());
      if (stat.find('_') == std::string::npos) return true;
    }
  }
  return false;
}

}  // namespace

std::string summary_csv(const BenchmarkReport& r) {
  std::string out = "run";
  for (const auto& a : r.aggregate) out.append(",").append(csv_column(a));
  out += "\n";
  for (size_t run = 0; run < r.runs.size(); ++run) {
    out += std::to_string(run + 1);
    for (const auto& a : r.aggregate) out.append(",").append(csv_value(a, a.per_run[run]));
    out += "\n";
  }
  if (!r.aggregate.empty()) {
    out += "median";
    for (const auto& a : r.aggregate) out.append(",").append(csv_value(a, a.spread.median));
    out += "\n";
  }
  // Stability: the coefficient of variation (2+ runs), 1 where above --cv-threshold, and the
  // bootstrap 95% CI of the median (5+ runs).
  const Stability stability = stability_of(r);
  if (!stability.metrics.empty()) {
    out += "cv";
    for (const auto& m : stability.metrics) out += fmt::format(",{:.4f}", m.cv);
    out += "\nunstable";
    for (const auto& m : stability.metrics) out += m.unstable ? ",1" : ",0";
    out += "\n";
  }
  if (!r.aggregate.empty() && r.aggregate.front().spread.ci95) {
    for (const bool lo : {true, false}) {
      out += lo ? "ci95_lo" : "ci95_hi";
      for (const auto& a : r.aggregate) {
        const double v = a.spread.ci95 ? (lo ? a.spread.ci95->lo : a.spread.ci95->hi) : 0.0;
        out.append(",").append(csv_value(a, v));
      }
      out += "\n";
    }
  }
  return out;
}

namespace {

// LoRA benchmarks: one row per adapter (BenchmarkReport::per_adapter), medians over the runs.
std::string adapter_table(const BenchmarkReport& r) {
  if (r.per_adapter.empty()) return "";
  auto median = [](const std::vector<AggregateMetric>& metrics, const std::string& key) {
    for (const auto& m : metrics) {
      if (m.key == key) return fmt::format("{:.2f}", m.spread.median);
    }
    return std::string("-");
  };
  std::string out =
      "\n| LoRA adapter | requests | output tok/s | TTFT median ms | TPOT median ms | "
      "E2EL median ms |\n| --- | ---: | ---: | ---: | ---: | ---: |\n";
  for (const auto& a : r.per_adapter) {
    out +=
        fmt::format("| {} | {} | {} | {} | {} | {} |\n", a.adapter, a.requests,
                    median(a.aggregate, "output_throughput"), median(a.aggregate, "median_ttft_ms"),
                    median(a.aggregate, "median_tpot_ms"), median(a.aggregate, "median_e2el_ms"));
  }
  return out;
}

}  // namespace

std::string markdown_summary(const BenchmarkReport& r) {
  std::vector<AggregateMetric> rows = r.aggregate;
  std::string status = fmt::format("{} run{}", r.runs.size(), r.runs.size() == 1 ? "" : "s");
  if (r.interrupted) {
    status = fmt::format("interrupted after {} of {} runs", r.runs.size(), r.runs_requested);
    if (rows.empty() && r.partial_run) {
      rows = aggregate_runs({flatten_metrics(*r.partial_run, r.metrics_options.percentiles)});
      status += "; the table shows the finished requests of the interrupted run";
    }
  }
  std::string out = fmt::format("### inferbench: {} on {} ({}, {} prompts, {})\n\n", r.model_id,
                                r.backend, r.load_description, r.num_prompts, status);
  if (rows.empty()) return out + "No request finished.\n";
  const Stability stability = stability_of(r);
  const bool cv = !stability.metrics.empty() && rows.size() == stability.metrics.size();
  out += cv ? "| metric | median | min | max | unit | CV |\n"
            : "| metric | median | min | max | unit |\n";
  out +=
      cv ? "| --- | ---: | ---: | ---: | --- | ---: |\n" : "| --- | ---: | ---: | ---: | --- |\n";
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto& a = rows[k];
    if (!shown(a, r.percentile_metrics)) continue;
    out += fmt::format("| {} | {} | {} | {} | {} |", a.label, md_value(a, a.spread.median),
                       md_value(a, a.spread.min), md_value(a, a.spread.max), a.unit);
    if (cv) {
      const auto& m = stability.metrics[k];
      out += fmt::format(" {:.1f}%{} |", 100.0 * m.cv, m.unstable ? " (!)" : "");
    }
    out += "\n";
  }
  if (cv) {
    Stability visible = stability;  // the warning names the rows of this table
    visible.metrics.clear();
    for (size_t k = 0; k < rows.size(); ++k) {
      if (shown(rows[k], r.percentile_metrics)) visible.metrics.push_back(stability.metrics[k]);
    }
    const std::string warning = stability_warning(visible);
    if (!warning.empty()) out += "\n" + warning + "\n";
  }
  out += adapter_table(r);
  for (const auto& line : r.footnotes) out.append("\n").append(line).append("\n");
  return out;
}

}  // namespace ib
