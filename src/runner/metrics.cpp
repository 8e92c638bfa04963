#include "runner/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

namespace ib {
namespace {

constexpr std::array<std::string_view, kNumLatencyMetrics> kLatencyLabels = {
    "TTFT", "TPOT", "ITL", "E2EL", "Queue time", "E2EL + queue"};

double ns_ms(int64_t ns) {
  return static_cast<double>(ns) / 1e6;
}

LatencyStats stats_of(std::vector<double> xs, std::span<const double> percentiles) {
  LatencyStats s;
  s.count = xs.size();
  std::sort(xs.begin(), xs.end());
  s.mean_ms = mean(xs);
  s.median_ms = percentile_sorted(xs, 50.0);
  s.std_ms = stddev_population(xs);
  for (double p : percentiles) s.percentiles_ms.push_back(percentile_sorted(xs, p));
  return s;
}

bool meets(const std::optional<double>& slo_ms, double value_ms) {
  return !slo_ms || value_ms <= *slo_ms;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t pos = 0;
  while (true) {
    const size_t next = s.find(sep, pos);
    out.push_back(
        s.substr(pos, next == std::string_view::npos ? std::string_view::npos : next - pos));
    if (next == std::string_view::npos) break;
    pos = next + 1;
  }
  return out;
}

std::optional<double> to_double(std::string_view s) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(v)) return std::nullopt;
  return v;
}

VisionRunMetrics vision_metrics(std::span<const RequestRecord> records,
                                std::span<const double> percentiles) {
  VisionRunMetrics v;
  std::vector<double> encode, queue, prefill;
  double kv_bytes = 0, visual_kv_bytes = 0;
  int completed = 0;
  for (const RequestRecord& r : records) {
    if (!r.ok) continue;
    ++completed;
    v.total_visual_tokens += r.visual_tokens;
    encode.push_back(ns_ms(r.encode_ns));
    if (r.t_scheduled_ns != 0) {
      queue.push_back(ns_ms(r.ttft_queue_ns()));
      prefill.push_back(ns_ms(r.ttft_prefill_ns()));
    }
    kv_bytes += static_cast<double>(r.kv_bytes);
    const int tokens = r.n_in + r.n_out;
    if (tokens > 0) {
      visual_kv_bytes += static_cast<double>(r.kv_bytes) * r.visual_tokens / tokens;
    }
  }
  if (completed > 0) {
    v.mean_visual_tokens = static_cast<double>(v.total_visual_tokens) / completed;
    v.mean_kv_bytes = kv_bytes / completed;
    v.mean_visual_kv_bytes = visual_kv_bytes / completed;
  }
  v.encode = stats_of(std::move(encode), percentiles);
  v.ttft_queue = stats_of(std::move(queue), percentiles);
  v.ttft_prefill = stats_of(std::move(prefill), percentiles);
  return v;
}

// mean, median, std and the percentiles of one latency, as "{stat}_{name}_ms".
void add_latency(std::vector<MetricValue>& out, const std::string& name, const std::string& label,
                 const LatencyStats& s, std::span<const double> percentiles) {
  out.push_back({"mean_" + name + "_ms", label + " mean", "ms", s.mean_ms});
  out.push_back({"median_" + name + "_ms", label + " median", "ms", s.median_ms});
  out.push_back({"std_" + name + "_ms", label + " std", "ms", s.std_ms});
  for (size_t p = 0; p < percentiles.size() && p < s.percentiles_ms.size(); ++p) {
    const std::string pk = percentile_key(percentiles[p]);
    out.push_back({pk + "_" + name + "_ms", label + " " + pk, "ms", s.percentiles_ms[p]});
  }
}

}  // namespace

RunMetrics compute_run_metrics(std::span<const RequestRecord> records,
                               const MetricsOptions& options) {
  RunMetrics m;
  std::array<std::vector<double>, kNumLatencyMetrics> values;
  auto& ttft = values[static_cast<size_t>(LatencyMetric::kTtft)];
  auto& tpot = values[static_cast<size_t>(LatencyMetric::kTpot)];
  auto& itl = values[static_cast<size_t>(LatencyMetric::kItl)];
  auto& e2el = values[static_cast<size_t>(LatencyMetric::kE2el)];
  auto& queue = values[static_cast<size_t>(LatencyMetric::kQueue)];
  auto& e2el_queue = values[static_cast<size_t>(LatencyMetric::kE2elQueue)];

  int64_t first_send = records.empty() ? 0 : records.front().t_send_ns;
  int64_t last_end = first_send;
  int good = 0;
  for (const RequestRecord& r : records) {
    first_send = std::min(first_send, r.t_send_ns);
    last_end = std::max(last_end, r.t_end_ns);
    if (!r.ok) {
      ++m.failed;
      continue;
    }
    ++m.completed;
    m.total_input_tokens += r.n_in;
    m.total_output_tokens += r.n_out;
    ttft.push_back(ns_ms(r.ttft_ns()));
    if (r.n_out > 1) tpot.push_back(r.tpot_ms());
    for (size_t k = 1; k < r.token_times_ns.size(); ++k) {
      itl.push_back(ns_ms(r.token_times_ns[k] - r.token_times_ns[k - 1]));
    }
    e2el.push_back(ns_ms(r.e2el_ns()));
    queue.push_back(ns_ms(r.queue_ns()));
    e2el_queue.push_back(ns_ms(r.e2el_ns() + r.queue_ns()));
    if (options.goodput && meets(options.goodput->ttft_ms, ns_ms(r.ttft_ns())) &&
        meets(options.goodput->tpot_ms, r.tpot_ms()) &&
        meets(options.goodput->e2el_ms, ns_ms(r.e2el_ns()))) {
      ++good;
    }
  }
  m.duration_s = static_cast<double>(std::max<int64_t>(last_end - first_send, 0)) / 1e9;
  const double per_s = m.duration_s > 0 ? 1.0 / m.duration_s : 0.0;
  m.request_throughput = m.completed * per_s;
  m.output_throughput = static_cast<double>(m.total_output_tokens) * per_s;
  m.total_token_throughput =
      static_cast<double>(m.total_input_tokens + m.total_output_tokens) * per_s;
  if (options.goodput) m.request_goodput = good * per_s;
  for (size_t i = 0; i < kNumLatencyMetrics; ++i) {
    m.latency[i] = stats_of(std::move(values[i]), options.percentiles);
  }
  const double mean_tpot = m[LatencyMetric::kTpot].mean_ms;
  m.per_sequence_decode_tok_s = mean_tpot > 0 ? 1000.0 / mean_tpot : 0.0;
  if (options.vision) m.vision = vision_metrics(records, options.percentiles);
  return m;
}

std::string percentile_key(double p) {
  return fmt::format("p{}", p);
}

std::vector<MetricValue> flatten_metrics(const RunMetrics& m, std::span<const double> percentiles) {
  std::vector<MetricValue> out = {
      {"duration", "Duration", "s", m.duration_s},
      {"completed", "Completed requests", "", static_cast<double>(m.completed)},
      {"failed", "Failed requests", "", static_cast<double>(m.failed)},
      {"total_input_tokens", "Input tokens", "", static_cast<double>(m.total_input_tokens)},
      {"total_output_tokens", "Output tokens", "", static_cast<double>(m.total_output_tokens)},
      {"request_throughput", "Request throughput", "req/s", m.request_throughput},
  };
  if (m.request_goodput) {
    out.push_back({"request_goodput", "Request goodput", "req/s", *m.request_goodput});
  }
  out.push_back({"output_throughput", "Output token throughput", "tok/s", m.output_throughput});
  out.push_back(
      {"total_token_throughput", "Total token throughput", "tok/s", m.total_token_throughput});
  out.push_back({"per_sequence_decode_rate", "Decode rate per sequence", "tok/s",
                 m.per_sequence_decode_tok_s});
  for (size_t i = 0; i < kNumLatencyMetrics; ++i) {
    const std::string name(kLatencyMetricNames[i]);
    const std::string label(kLatencyLabels[i]);
    add_latency(out, name, label, m.latency[i], percentiles);
  }
  if (m.vision) {
    const VisionRunMetrics& v = *m.vision;
    out.push_back(
        {"total_visual_tokens", "Visual tokens", "", static_cast<double>(v.total_visual_tokens)});
    out.push_back({"mean_visual_tokens", "Visual tokens per request", "", v.mean_visual_tokens});
    add_latency(out, "encode", "Vision encoder", v.encode, percentiles);
    add_latency(out, "ttft_queue", "TTFT queue", v.ttft_queue, percentiles);
    add_latency(out, "ttft_prefill", "TTFT prefill", v.ttft_prefill, percentiles);
    out.push_back({"mean_kv_bytes", "KV bytes per request", "B", v.mean_kv_bytes});
    out.push_back(
        {"mean_visual_kv_bytes", "Visual KV bytes per request", "B", v.mean_visual_kv_bytes});
  }
  return out;
}

std::vector<AggregateMetric> aggregate_runs(const std::vector<std::vector<MetricValue>>& runs) {
  std::vector<AggregateMetric> out;
  if (runs.empty()) return out;
  for (size_t k = 0; k < runs[0].size(); ++k) {
    AggregateMetric a;
    a.key = runs[0][k].key;
    a.label = runs[0][k].label;
    a.unit = runs[0][k].unit;
    for (const auto& run : runs) {
      IB_ASSERT(k < run.size() && run[k].key == a.key, "runs flattened with different keys");
      a.per_run.push_back(run[k].value);
    }
    a.spread = spread_of(a.per_run);
    out.push_back(std::move(a));
  }
  return out;
}

Result<GoodputSlo> parse_goodput(std::string_view spec) {
  GoodputSlo slo;
  for (std::string_view item : split(spec, ',')) {
    const size_t colon = item.find(':');
    const std::string_view name = item.substr(0, colon);
    const auto value =
        colon == std::string_view::npos ? std::nullopt : to_double(item.substr(colon + 1));
    if (!value || *value < 0) {
      return user_error(fmt::format(
          "--goodput: '{}' is not NAME:MS with a non-negative number; e.g. ttft:200,tpot:50",
          item));
    }
    if (name == "ttft") {
      slo.ttft_ms = value;
    } else if (name == "tpot") {
      slo.tpot_ms = value;
    } else if (name == "e2el") {
      slo.e2el_ms = value;
    } else {
      return user_error(
          fmt::format("--goodput: unknown metric '{}'; use ttft, tpot or e2el", name));
    }
  }
  return slo;
}

Result<std::vector<std::string>> parse_percentile_metrics(std::string_view spec) {
  std::vector<std::string> out;
  for (std::string_view item : split(spec, ',')) {
    if (std::find(kLatencyMetricNames.begin(), kLatencyMetricNames.end(), item) ==
        kLatencyMetricNames.end()) {
      return user_error(fmt::format(
          "--percentile-metrics: unknown metric '{}'; choose from ttft, tpot, itl, e2el, "
          "client_queue_time, e2el_including_client_queue",
          item));
    }
    out.emplace_back(item);
  }
  return out;
}

Result<std::vector<double>> parse_metric_percentiles(std::string_view spec) {
  std::vector<double> out;
  for (std::string_view item : split(spec, ',')) {
    const auto p = to_double(item);
    if (!p || *p < 0 || *p > 100) {
      return user_error(fmt::format(
          "--metric-percentiles: '{}' is not a percentile in [0, 100]; e.g. 50,90,99", item));
    }
    out.push_back(*p);
  }
  return out;
}

}  // namespace ib
