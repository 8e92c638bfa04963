// memory.csv and allocations.csv, sample labels, and the choice of the heatmap's series.
#include <cmath>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "report/memory_report.h"

namespace ib {
namespace {

constexpr const char* kFixedColumns[] = {"time_ns", "time_s", "phase", "step"};

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string cell(const std::string& column, double v) {
  if (!std::isfinite(v)) return "";
  if (ends_with(column, "_bytes")) return fmt::format("{:.0f}", v);
  return fmt::format("{}", v);
}

std::vector<std::string> split(const std::string& line, char sep) {
  std::vector<std::string> out;
  std::string field;
  std::istringstream in(line);
  while (std::getline(in, field, sep)) out.push_back(field);
  if (!line.empty() && line.back() == sep) out.emplace_back();
  return out;
}

}  // namespace

void label_samples(MemoryRecording& r, const std::vector<StepRecord>& steps) {
  const auto& t = r.timeline.time_ns;
  r.sample_phase.clear();
  r.sample_step.clear();
  for (size_t k = 0; k < t.size(); ++k) {
    r.sample_phase.push_back(phase_at(r.phases, t[k]));
    // The step kind over the interval that ends at this sample.
    r.sample_step.push_back(k == 0 ? "idle" : step_kind_in(steps, t[k - 1], t[k]));
  }
}

std::string heatmap_caption(const std::string& column) {
  if (column == "engine_demand_bytes") {
    return "engine demand: weights + KV blocks in use + activations/workspace + CUDA graphs";
  }
  if (column == "rss_bytes") return "host memory: process resident set (RSS)";
  if (column == "gpus_used_bytes") return "GPU memory used (NVML v2, all GPUs, without reserved)";
  return column;
}

HeatmapMetric heatmap_metric(const Timeline& tl, const std::string& device_kind) {
  std::string column;
  if (device_kind == "cuda" && tl.column("engine_demand_bytes") >= 0) {
    column = "engine_demand_bytes";
  } else if (device_kind == "cpu" && tl.column("rss_bytes") >= 0) {
    column = "rss_bytes";
  } else if (tl.column("gpus_used_bytes") >= 0) {
    column = "gpus_used_bytes";
  } else if (tl.column("engine_demand_bytes") >= 0) {
    column = "engine_demand_bytes";
  } else {
    column = "rss_bytes";
  }
  return {column, heatmap_caption(column)};
}

std::string memory_csv(const MemoryRecording& r) {
  const Timeline& tl = r.timeline;
  std::string out;
  for (const char* c : kFixedColumns) {
    out += c;
    out += ',';
  }
  for (size_t c = 0; c < tl.columns.size(); ++c) {
    if (c > 0) out += ',';
    out += tl.columns[c];
  }
  out += '\n';
  for (size_t k = 0; k < tl.rows.size(); ++k) {
    out += fmt::format("{},{:.3f},{},{}", tl.time_ns[k], static_cast<double>(tl.time_ns[k]) / 1e9,
                       k < r.sample_phase.size() ? r.sample_phase[k] : "",
                       k < r.sample_step.size() ? r.sample_step[k] : "");
    for (size_t c = 0; c < tl.columns.size(); ++c) {
      out += ',';
      out += cell(tl.columns[c], tl.rows[k][c]);
    }
    out += "\n";
  }
  return out;
}

Result<MemoryRecording> parse_memory_csv(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  if (!std::getline(in, line)) return user_error("memory.csv is empty");
  const auto header = split(line, ',');
  constexpr size_t kFixed = std::size(kFixedColumns);
  for (size_t i = 0; i < kFixed; ++i) {
    if (header.size() <= i || header[i] != kFixedColumns[i]) {
      return user_error(
          fmt::format("memory.csv: column {} should be {}; is this a memory.csv from inferbench?",
                      i + 1, kFixedColumns[i]));
    }
  }
  MemoryRecording r;
  r.timeline.columns.assign(header.begin() + kFixed, header.end());
  int line_no = 1;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    const auto f = split(line, ',');
    if (f.size() != header.size()) {
      return user_error(fmt::format("memory.csv line {}: {} fields, expected {}", line_no, f.size(),
                                    header.size()));
    }
    int64_t t = 0;
    try {
      t = std::stoll(f[0]);
    } catch (const std::exception&) {
      return user_error(
          fmt::format("memory.csv line {}: time_ns {} is not a number", line_no, f[0]));
    }
    std::vector<double> row;
    for (size_t i = kFixed; i < f.size(); ++i) {
      double v = std::numeric_limits<double>::quiet_NaN();
      if (!f[i].empty()) {
        try {
          v = std::stod(f[i]);
        } catch (const std::exception&) {
          return user_error(fmt::format("memory.csv line {}: {} is not a number", line_no, f[i]));
        }
      }
      row.push_back(v);
    }
    r.timeline.time_ns.push_back(t);
    r.timeline.rows.push_back(std::move(row));
    r.sample_phase.push_back(f[2]);
    r.sample_step.push_back(f[3]);
  }
  return r;
}

std::string allocations_csv(const AllocationAnalysis& a) {
  std::string out =
      "time_ns,event,address,bytes,tag,phase,span_bytes,total_free_bytes,largest_free_bytes,"
      "external_fragmentation\n";
  for (const auto& e : a.events) {
    const FragmentationPoint p = a.fragmentation_at(e.time_ns);
    out += fmt::format("{},{},{:#x},{},{},{},{},{},{},{:.4f}\n", e.time_ns,
                       e.bytes > 0 ? "alloc" : "free", e.address, e.bytes > 0 ? e.bytes : -e.bytes,
                       e.tag, e.phase, p.span_bytes, p.total_free_bytes, p.largest_free_bytes,
                       p.external);
  }
  return out;
}

}  // namespace ib
