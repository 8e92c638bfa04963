// Metric-by-metric comparison of two result.json documents.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "compare/compare.h"
#include "core/stats.h"

namespace ib {
namespace {

using nlohmann::json;

struct MetricDef {
  const char* key;
  const char* label;
  const char* unit;
  bool higher_is_better;
};

// Run-level metrics with per-run values in result.json "spread".
constexpr MetricDef kRunMetrics[] = {
    {"output_throughput", "Output token throughput", "tok/s", true},
    {"total_token_throughput", "Total token throughput", "tok/s", true},
    {"request_throughput", "Request throughput", "req/s", true},
    {"median_ttft_ms", "TTFT median", "ms", false},
    {"p99_ttft_ms", "TTFT p99", "ms", false},
    {"median_tpot_ms", "TPOT median", "ms", false},
    {"p99_tpot_ms", "TPOT p99", "ms", false},
    {"median_itl_ms", "ITL median", "ms", false},
    {"p99_itl_ms", "ITL p99", "ms", false},
    {"median_e2el_ms", "E2EL median", "ms", false},
    {"p99_e2el_ms", "E2EL p99", "ms", false},
};

const char* const kWorkloadKeys[] = {"model",
                                     "backend",
                                     "num_prompts",
                                     "input_len",
                                     "output_len",
                                     "load_mode",
                                     "batch_size",
                                     "max_concurrency",
                                     "request_rate",
                                     "burstiness",
                                     "dtype",
                                     "device",
                                     "dataset_name",
                                     "dataset_path",
                                     "max_model_len",
                                     "ignore_eos",
                                     "temperature",
                                     "top_p",
                                     "top_k",
                                     "load_format",
                                     "quantization",
                                     "kv_cache_dtype",
                                     "block_sparse_attention",
                                     "tensor_parallel_size"};
// --calibration's settings are part of the workload too (null in results from before the flag).
const char* const kCalibrationKeys[] = {"calibration", "calibration_scheme",
                                        "calibration_percentile", "calibration_prompts"};

std::vector<double> per_run(const json& result, const std::string& key) {
  std::vector<double> out;
  const json& spread = result.value("spread", json::object());
  if (spread.contains(key) && spread[key].contains("per_run")) {
    for (const auto& v : spread[key]["per_run"]) {
      if (v.is_number()) out.push_back(v.get<double>());
    }
    return out;
  }
  for (const auto& run : result.value("runs", json::array())) {
    const json& m = run.value("metrics", json::object());
    if (m.contains(key) && m[key].is_number()) out.push_back(m[key].get<double>());
  }
  return out;
}

// Per-run energy of the measured runs: joules and output tokens per joule.
std::vector<double> energy_per_run(const json& result, const char* field) {
  std::vector<double> out;
  const json& energy = result.value("energy", json::object());
  if (!energy.value("available", false)) return out;
  for (const auto& p : energy.value("phases", json::array())) {
    if (p.value("phase", "").rfind("run ", 0) == 0 && p.contains(field) && p[field].is_number()) {
      out.push_back(p[field].get<double>());
    }
  }
  return out;
}

std::vector<double> peak(const json& result, const char* column) {
  const json& peaks = result.value("memory", json::object()).value("peaks", json::object());
  if (peaks.contains(column) && peaks[column].is_number()) return {peaks[column].get<double>()};
  return {};
}

MetricComparison judge(MetricComparison m, double threshold) {
  m.a = median(m.a_values);
  m.b = median(m.b_values);
  if (m.a != 0) {
    m.change = (m.b - m.a) / std::fabs(m.a);
  } else if (m.b == 0) {
    m.change = 0.0;
  }
  m.test = welch_t_test(m.a_values, m.b_values);
  m.change_only = !m.test.has_value();
  if (!m.change) {
    m.verdict = "new (zero before)";
    return m;
  }
  const double worse_by = m.higher_is_better ? -*m.change : *m.change;
  const bool significant = m.change_only || m.test->p < kSignificance;
  if (worse_by > threshold) {
    m.regression = significant;
    m.verdict = significant ? "REGRESSION" : "worse, not significant";
  } else if (-worse_by > threshold) {
    m.verdict = significant ? "improvement" : "better, not significant";
  } else {
    m.verdict = "within threshold";
  }
  if (m.change_only) m.verdict += " (change only)";
  return m;
}

// Both values of a row with the same decimals, chosen by the larger one.
std::string value_text(double v, const MetricComparison& m) {
  const double scale = std::max(std::fabs(m.a), std::fabs(m.b));
  const int digits = m.unit == "GiB" ? 3 : scale >= 100 ? 1 : scale >= 1 ? 2 : 4;
  return fmt::format("{:.{}f}", v, digits);
}

}  // namespace

int Comparison::regressions() const {
  return static_cast<int>(
      std::count_if(metrics.begin(), metrics.end(), [](const auto& m) { return m.regression; }));
}

std::vector<std::string> workload_differences(const json& a, const json& b) {
  const json& ca = a.value("config", json::object());
  const json& cb = b.value("config", json::object());
  std::vector<std::string> out;
  const auto differ = [&](const char* key) {
    const json va = ca.contains(key) ? ca[key] : json(nullptr);
    const json vb = cb.contains(key) ? cb[key] : json(nullptr);
    if (va != vb) out.push_back(fmt::format("{}: {} vs {}", key, va.dump(), vb.dump()));
  };
  for (const char* key : kWorkloadKeys) differ(key);
  for (const char* key : kCalibrationKeys) differ(key);
  return out;
}

Comparison compare_results(const json& a, const json& b, double threshold) {
  Comparison c;
  c.threshold = threshold;
  c.workload_differences = workload_differences(a, b);
  c.switch_differences = switch_differences(a, b);
  c.a_records_switches = a.contains("kernel_switches");
  c.b_records_switches = b.contains("kernel_switches");
  const auto add = [&](const std::string& key, const std::string& label, const std::string& unit,
                       bool higher, std::vector<double> va, std::vector<double> vb) {
    if (va.empty() && vb.empty()) return;
    if (va.empty() || vb.empty()) {
      c.notes.push_back(fmt::format("{}: only in {}", key, va.empty() ? "B" : "A"));
      return;
    }
    MetricComparison m;
    m.key = key;
    m.label = label;
    m.unit = unit;
    m.higher_is_better = higher;
    m.a_values = std::move(va);
    m.b_values = std::move(vb);
    c.metrics.push_back(judge(std::move(m), threshold));
  };
  for (const auto& d : kRunMetrics) {
    add(d.key, d.label, d.unit, d.higher_is_better, per_run(a, d.key), per_run(b, d.key));
  }
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  for (const auto& [column, label] : {std::pair{"gpus_used_bytes", "Peak GPU memory used"},
                                      std::pair{"engine_allocated_bytes", "Peak engine allocation"},
                                      std::pair{"rss_bytes", "Peak process RSS"}}) {
    auto va = peak(a, column);
    auto vb = peak(b, column);
    for (auto& v : va) v /= kGiB;
    for (auto& v : vb) v /= kGiB;
    add(std::string("peak_") + column, label, "GiB", false, va, vb);
  }
  add("energy_joules_per_run", "Energy per run", "J", false, energy_per_run(a, "joules"),
      energy_per_run(b, "joules"));
  add("output_tokens_per_joule", "Output tokens per joule", "tok/J", true,
      energy_per_run(a, "tokens_per_joule"), energy_per_run(b, "tokens_per_joule"));
  return c;
}

std::string comparison_markdown(const Comparison& c) {
  std::string out = fmt::format("### inferbench compare: {} → {}\n\n", c.a_name, c.b_name);
  out += fmt::format(
      "Threshold {:.1f}%; significance: Welch's two-sided t-test over the per-run values, p < "
      "{} (rows marked \"change only\" have fewer than 2 values on a side).\n",
      100.0 * c.threshold, kSignificance);
  if (!c.workload_differences.empty()) {
    out += fmt::format("\nWorkloads differ (compared with --force): {}.\n",
                       fmt::join(c.workload_differences, "; "));
  }
  if (!c.switch_differences.empty()) {
    std::vector<std::string> lines;
    for (const auto& d : c.switch_differences) lines.push_back(switch_difference_text(d));
    out += fmt::format("\nKernel switches differ{}: {}.\n",
                       c.switches_refuse() ? " (compared with --allow-switch-diff)" : "",
                       fmt::join(lines, "; "));
  }
  if (!c.a_records_switches || !c.b_records_switches) {
    out += fmt::format(
        "\nKernel switches unknown: {} records none (written before they were recorded), so "
        "whether they differ is unknown.\n",
        !c.a_records_switches && !c.b_records_switches ? "neither result"
        : !c.a_records_switches                        ? "A"
                                                       : "B");
  }
  out += "\n| metric | unit | A | B | change | p | runs | verdict |\n";
  out += "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- |\n";
  for (const auto& m : c.metrics) {
    const std::string change = m.change ? fmt::format("{:+.1f}%", 100.0 * *m.change) : "n/a";
    const std::string p = m.test ? fmt::format("{:.3g}", m.test->p) : "-";
    out += fmt::format("| {} | {} | {} | {} | {} | {} | {}/{} | {} |\n", m.label, m.unit,
                       value_text(m.a, m), value_text(m.b, m), change, p, m.a_values.size(),
                       m.b_values.size(), m.verdict);
  }
  for (const auto& n : c.notes) out += "\nNot compared: " + n + ".";
  if (!c.notes.empty()) out += "\n";
  std::vector<std::string> names;
  for (const auto& m : c.metrics) {
    if (m.regression) names.push_back(m.key);
  }
  out += names.empty() ? "\nNo significant regression.\n"
                       : fmt::format("\n{} significant regression{}: {}.\n", names.size(),
                                     names.size() == 1 ? "" : "s", fmt::join(names, ", "));
  return out;
}

json comparison_json(const Comparison& c) {
  json metrics = json::array();
  for (const auto& m : c.metrics) {
    json j{{"key", m.key},
           {"label", m.label},
           {"unit", m.unit},
           {"higher_is_better", m.higher_is_better},
           {"a", m.a},
           {"b", m.b},
           {"a_values", m.a_values},
           {"b_values", m.b_values},
           {"relative_change", m.change ? json(*m.change) : json(nullptr)},
           {"test", m.test ? json("welch_t") : json("change_only")},
           {"p_value", m.test ? json(m.test->p) : json(nullptr)},
           {"t", m.test && std::isfinite(m.test->t) ? json(m.test->t) : json(nullptr)},
           {"df", m.test ? json(m.test->df) : json(nullptr)},
           {"regression", m.regression},
           {"verdict", m.verdict}};
    metrics.push_back(std::move(j));
  }
  json switches = json::array();
  for (const auto& d : c.switch_differences) {
    switches.push_back({{"name", d.name}, {"a", d.a}, {"b", d.b}, {"refuses", d.refuses}});
  }
  return json{
      {"a", c.a_name},
      {"b", c.b_name},
      {"threshold", c.threshold},
      {"significance", kSignificance},
      {"workload_differences", c.workload_differences},
      {"kernel_switch_differences", std::move(switches)},
      {"kernel_switches_recorded", {{"a", c.a_records_switches}, {"b", c.b_records_switches}}},
      {"metrics", std::move(metrics)},
      {"notes", c.notes},
      {"regressions", c.regressions()}};
}

}  // namespace ib
