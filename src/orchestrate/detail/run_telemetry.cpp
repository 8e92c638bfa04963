#include "orchestrate/detail/run_telemetry.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>

#include <fmt/format.h>

#include "core/fs.h"

namespace ib {
namespace {

using nlohmann::json;
constexpr int kBlockMapFrames = 200;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Sum of the named columns per sample (NaN when one is missing); empty when a column is absent.
std::vector<double> column_sum(const Timeline& tl, const std::vector<std::string>& names) {
  std::vector<int> cols;
  for (const auto& n : names) {
    const int c = tl.column(n);
    if (c < 0) return {};
    cols.push_back(c);
  }
  std::vector<double> out;
  for (const auto& row : tl.rows) {
    double sum = 0;
    for (int c : cols) sum += row[static_cast<size_t>(c)];
    out.push_back(sum);
  }
  return out;
}

std::vector<std::string> gpu_columns(const Timeline& tl, const char* field) {
  std::vector<std::string> out;
  for (int i = 0; tl.column(fmt::format("gpu{}_{}", i, field)) >= 0; ++i) {
    out.push_back(fmt::format("gpu{}_{}", i, field));
  }
  return out;
}

int cuda_index(const std::string& device) {
  if (device.rfind("cuda:", 0) != 0) return 0;
  return std::atoi(device.c_str() + 5);
}

// Before the engine exists (while the weights load) the target reports no pools: the trace
// of the tracked allocator fills them in (nothing is in the KV blocks yet).
void fill_pools_from_trace(Timeline& tl, const std::vector<MemoryEvent>& trace, int64_t origin_ns) {
  const int allocated = tl.column("engine_allocated_bytes");
  if (allocated < 0 || trace.empty()) return;
  const auto live = live_bytes_by_tag(trace, origin_ns, tl.time_ns);
  auto tag = [](const std::array<int64_t, kNumMemoryTags>& l, MemoryTag t) {
    return static_cast<double>(l[static_cast<size_t>(t)]);
  };
  const std::pair<const char*, std::function<double(const std::array<int64_t, kNumMemoryTags>&)>>
      fills[] = {
          {"engine_allocated_bytes",
           [&](const auto& l) {
             double sum = 0;
             for (int64_t b : l) sum += static_cast<double>(b);
             return sum;
           }},
          {"weights_bytes", [&](const auto& l) { return tag(l, MemoryTag::kWeights); }},
          {"kv_pool_bytes", [&](const auto& l) { return tag(l, MemoryTag::kKvCache); }},
          {"kv_used_bytes", [](const auto&) { return 0.0; }},
          {"activations_bytes",
           [&](const auto& l) {
             return tag(l, MemoryTag::kActivations) + tag(l, MemoryTag::kWorkspace);
           }},
          {"graph_bytes", [&](const auto& l) { return tag(l, MemoryTag::kGraph); }},
      };
  for (size_t k = 0; k < tl.rows.size(); ++k) {
    if (std::isfinite(tl.rows[k][static_cast<size_t>(allocated)])) continue;
    for (const auto& [name, value] : fills) {
      const int c = tl.column(name);
      if (c >= 0) tl.rows[k][static_cast<size_t>(c)] = value(live[k]);
    }
  }
}

// engine_demand_bytes, gpus_used_bytes and, on a GPU, unattributed_bytes = NVML used (this
// process's where visible) minus what the engine's tracked allocator holds.
void add_derived_columns(Timeline& tl, const std::string& device) {
  auto demand =
      column_sum(tl, {"weights_bytes", "kv_used_bytes", "activations_bytes", "graph_bytes"});
  if (!demand.empty()) tl.add_column("engine_demand_bytes", demand);
  const auto gpu_used = gpu_columns(tl, "used_bytes");
  if (!gpu_used.empty()) tl.add_column("gpus_used_bytes", column_sum(tl, gpu_used));
  const int engine = tl.column("engine_allocated_bytes");
  if (engine < 0 || device.rfind("cuda", 0) != 0) return;
  const int i = cuda_index(device);
  const int process = tl.column(fmt::format("gpu{}_process_used_bytes", i));
  const int used = tl.column(fmt::format("gpu{}_used_bytes", i));
  const bool process_seen = process >= 0 && std::isfinite(tl.max_of(process));
  const int total = process_seen ? process : used;
  if (total < 0) return;
  std::vector<double> unattributed;
  for (const auto& row : tl.rows) {
    unattributed.push_back(row[static_cast<size_t>(total)] - row[static_cast<size_t>(engine)]);
  }
  tl.add_column("unattributed_bytes", unattributed);
}

int64_t output_tokens(const std::vector<RequestRecord>& records) {
  int64_t n = 0;
  for (const auto& r : records) {
    if (r.ok) n += r.n_out;
  }
  return n;
}

json metrics_rows(const BenchmarkReport& report) {
  json rows = json::array();
  for (const auto& a : report.aggregate) {
    rows.push_back(json{{"metric", a.key},
                        {"unit", a.unit},
                        {"median", a.spread.median},
                        {"min", a.spread.min},
                        {"max", a.spread.max}});
  }
  return rows;
}

}  // namespace

std::vector<PhaseSpan> benchmark_phases(const BenchmarkRecords& records, int64_t origin_ns,
                                        int64_t loaded_ns) {
  std::vector<PhaseSpan> phases;
  phases.push_back({"load", 0, std::max<int64_t>(0, loaded_ns - origin_ns)});
  auto add = [&](const std::vector<RequestRecord>& recs, const std::string& name) {
    if (recs.empty()) return;
    int64_t start = std::numeric_limits<int64_t>::max();
    int64_t end = std::numeric_limits<int64_t>::min();
    for (const auto& r : recs) {
      start = std::min(start, r.t_send_ns);
      end = std::max({end, r.t_end_ns, r.t_send_ns});
    }
    phases.push_back({name, start - origin_ns, end - origin_ns});
  };
  add(records.warmup, "warm-up");
  for (size_t k = 0; k < records.runs.size(); ++k) add(records.runs[k], fmt::format("run {}", k));
  add(records.partial_run, fmt::format("run {} (interrupted)", records.runs.size()));
  return phases;
}

RunTelemetry::RunTelemetry(const RunPlan& plan, int64_t origin_ns)
    : plan_(plan), origin_ns_(origin_ns), enabled_(plan.telemetry) {}

TargetOptions RunTelemetry::instrument(TargetOptions options) {
  if (!enabled_) return options;
  auto shared = shared_;
  options.native.on_step = [shared](const StepStats& s) {
    StepRecord r{s.start_ns, s.duration_ns, s.num_prefill_tokens, s.num_decode_tokens};
    r.num_seqs = s.num_seqs;
    if (StepStats::HostPhases h; s.host_phases(h)) {
      r.schedule_ns = h.schedule_ns;
      r.launch_ns = h.launch_ns;
      r.wait_ns = h.wait_ns;
      r.finish_ns = h.finish_ns;
    }
    r.device_ns = s.device_ns;
    r.graph = s.graph;
    shared->steps.add(r);
  };
  options.native.trace_allocations = true;
  options.native.on_allocation_trace = [shared](std::vector<MemoryEvent> trace) {
    std::lock_guard lock(shared->mu);
    shared->trace = std::move(trace);
  };
  return options;
}

void RunTelemetry::finish(const Sampler& sampler, const BenchmarkRecords& records,
                          BenchmarkReport& report) {
  if (!enabled_) {
    report.memory = json{{"telemetry", "off (--disable-telemetry)"}};
    report.energy = json{{"available", false}, {"reason", "telemetry off (--disable-telemetry)"}};
    return;
  }
  std::vector<MemoryEvent> trace;
  {
    std::lock_guard lock(shared_->mu);
    if (shared_->trace) trace = std::move(*shared_->trace);
  }
  MemoryRecording r;
  r.label = plan_.model.name;
  r.timeline = sampler.timeline();
  fill_pools_from_trace(r.timeline, trace, origin_ns_);
  add_derived_columns(r.timeline, plan_.device);
  r.phases = benchmark_phases(records, origin_ns_, loaded_ns_);
  steps_ = shared_->steps.steps(origin_ns_);
  const std::vector<StepRecord>& steps = steps_;
  const bool native = plan_.backend == "native";
  const std::string device_kind = !native                              ? ""
                                  : plan_.device.rfind("cuda", 0) == 0 ? "cuda"
                                                                       : "cpu";
  const HeatmapMetric metric = heatmap_metric(r.timeline, device_kind);
  r.heatmap_column = metric.column;

  json allocations = nullptr;
  if (!trace.empty()) {
    const int64_t end = r.timeline.time_ns.empty() ? 0 : r.timeline.time_ns.back();
    std::vector<int64_t> frames;
    for (int f = 0; f < kBlockMapFrames; ++f) frames.push_back(end * f / (kBlockMapFrames - 1));
    r.allocations = analyze_allocations(trace, origin_ns_, r.phases, frames);
    allocations = r.allocations->summary(steps);
  }
  if (r.allocations) {
    std::vector<double> total;
    std::vector<double> largest;
    std::vector<double> external;
    for (int64_t t : r.timeline.time_ns) {
      const FragmentationPoint p = r.allocations->fragmentation_at(t);
      total.push_back(static_cast<double>(p.total_free_bytes));
      largest.push_back(static_cast<double>(p.largest_free_bytes));
      external.push_back(p.external);
    }
    r.timeline.add_column("frag_total_free_bytes", total);
    r.timeline.add_column("frag_largest_free_bytes", largest);
    r.timeline.add_column("frag_external_ratio", external);
  }
  label_samples(r, steps);

  json peaks = json::object();
  for (size_t c = 0; c < r.timeline.columns.size(); ++c) {
    const std::string& name = r.timeline.columns[c];
    if (!ends_with(name, "_bytes") || name.rfind("frag_", 0) == 0) continue;
    const double v = r.timeline.max_of(static_cast<int>(c));
    peaks[name] = std::isfinite(v) ? json(static_cast<int64_t>(v)) : json(nullptr);
  }
  json phases = json::array();
  for (const auto& p : r.phases) {
    phases.push_back(json{{"name", p.name}, {"start_ns", p.start_ns}, {"end_ns", p.end_ns}});
  }
  int64_t prefill_steps = 0;
  for (const auto& s : steps) prefill_steps += s.prefill_heavy() ? 1 : 0;

  report.memory = sampler.summary();
  report.memory["peaks"] = peaks;
  report.memory["phases"] = phases;
  report.memory["steps"] =
      json{{"total", steps.size()},
           {"prefill_heavy", prefill_steps},
           {"decode_heavy", static_cast<int64_t>(steps.size()) - prefill_steps}};
  report.memory["heatmap"] = json{{"column", metric.column}, {"caption", metric.caption}};
  report.memory["allocations"] = allocations;

  std::vector<std::pair<std::string, int64_t>> tokens;
  tokens.emplace_back("warm-up", output_tokens(records.warmup));
  for (size_t k = 0; k < records.runs.size(); ++k) {
    tokens.emplace_back(fmt::format("run {}", k), output_tokens(records.runs[k]));
  }
  report.energy = energy_report(r.timeline, r.phases, steps, tokens);
  recording_ = std::move(r);
}

Result<std::vector<std::string>> RunTelemetry::write_outputs(const std::filesystem::path& dir,
                                                             const BenchmarkReport& report) const {
  std::vector<std::string> written;
  if (!recording_) return written;
  const MemoryRecording& r = *recording_;
  IB_TRY(write_file_atomic(dir / kMemoryCsv, memory_csv(r)));
  written.emplace_back(kMemoryCsv);
  IB_TRY(write_file_atomic(dir / kStepsCsv, steps_csv(steps_, r.phases)));
  written.emplace_back(kStepsCsv);
  if (r.allocations) {
    IB_TRY(write_file_atomic(dir / kAllocationsCsv, allocations_csv(*r.allocations)));
    written.emplace_back(kAllocationsCsv);
  }
  const Heatmap heatmap = build_heatmap({r});
  const std::string title = fmt::format("{} on {}: memory over time", r.label, plan_.device);
  IB_TRY(write_file_atomic(dir / kHeatmapSvg, heatmap_svg(heatmap, title)));
  written.emplace_back(kHeatmapSvg);
  auto plotly = load_plotly_js();
  if (!plotly.ok()) {
    std::fprintf(stderr, "inferbench: %s\n", plotly.error().message.c_str());
    return written;
  }
  HtmlReport html;
  html.title = title;
  html.subtitle = fmt::format("{}, {} · {} · {} run(s) · {}", report.backend, report.date,
                              report.load_description, report.runs.size(), report.weights);
  html.heatmap = heatmap;
  html.recordings = {r};
  html.metrics = metrics_rows(report);
  html.energy = report.energy;
  IB_TRY(write_file_atomic(dir / kReportHtml, report_html(html, *plotly)));
  written.emplace_back(kReportHtml);
  return written;
}

}  // namespace ib
