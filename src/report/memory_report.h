// The memory outputs of a result directory — memory.csv (every sample, units in the column
// names), allocations.csv (the allocation trace), heatmap.svg (time x run/model, viridis, one
// scale for every row) and report.html (one self-contained offline file with plotly.js
// inlined) — and what `inferbench plot` reads back from result directories.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "telemetry/telemetry.h"

namespace ib {

inline constexpr const char* kMemoryCsv = "memory.csv";
inline constexpr const char* kAllocationsCsv = "allocations.csv";
inline constexpr const char* kHeatmapSvg = "heatmap.svg";
inline constexpr const char* kReportHtml = "report.html";

// One benchmark's telemetry, ready to draw.
struct MemoryRecording {
  std::string label;                      // row label prefix (the model; plot adds the directory)
  Timeline timeline;                      // times since the benchmark's origin
  std::vector<std::string> sample_phase;  // (samples): "load", "warm-up", "run k", "idle"
  std::vector<std::string> sample_step;   // (samples): "prefill", "decode" or "idle"
  std::vector<PhaseSpan> phases;
  std::string heatmap_column;  // the series the heatmap draws
  std::optional<AllocationAnalysis> allocations;
};

// Adds phase and step labels to every sample (from phases and the engine's steps).
void label_samples(MemoryRecording& recording, const std::vector<StepRecord>& steps);

// Which series a heatmap draws and how the caption names it: the engine's demand (weights + KV
// blocks in use + activations + graphs) for GPU runs of the embedded engine, process RSS for CPU
// runs, NVML used memory for other targets.
struct HeatmapMetric {
  std::string column;
  std::string caption;
};
HeatmapMetric heatmap_metric(const Timeline& timeline, const std::string& device_kind);
std::string heatmap_caption(const std::string& column);

// memory.csv: time_ns, time_s, phase, step, then every series; empty cells where a value was
// not available. parse_memory_csv reads it back (user error naming what is wrong).
std::string memory_csv(const MemoryRecording& recording);
Result<MemoryRecording> parse_memory_csv(const std::string& text);
std::string allocations_csv(const AllocationAnalysis& analysis);

// The heatmap: one row per phase (load, warm-up, run k) of each recording (of each rank, for the
// engine's demand under tensor parallelism: rank<r>_demand_bytes), each aligned at its phase
// start; values linearly interpolated from the samples onto a uniform grid of frames
// (frame centres), NaN after the phase ended; one colour scale (0 to the largest value) for all.
struct HeatmapRow {
  std::string label;                // "<recording label> · <phase>" or "... · rank r · <phase>"
  std::string model;                // the recording label, for the model selector
  std::vector<double> gib;          // (frames)
  std::vector<std::string> detail;  // (frames): "run 0 · decode"
};
struct Heatmap {
  std::vector<HeatmapRow> rows;
  double frame_s = 0;  // frame width
  int frames = 0;
  double zmax_gib = 0;
  std::string caption;
};
Heatmap build_heatmap(const std::vector<MemoryRecording>& recordings, int frames = 120);
std::string heatmap_svg(const Heatmap& heatmap, const std::string& title);

// report.html inputs. metrics: rows {"metric", "unit", "median", "min", "max"}; energy: the
// result's energy section (may be empty).
struct HtmlReport {
  std::string title;
  std::string subtitle;
  Heatmap heatmap;
  std::vector<MemoryRecording> recordings;
  nlohmann::json metrics = nlohmann::json::array();
  nlohmann::json energy = nlohmann::json::object();
};
std::string report_html(const HtmlReport& report, const std::string& plotly_js);

// plotly.min.js: $INFERBENCH_PLOTLY_JS, else the path compiled in from CMake (the npm package
// installed by scripts/install-deps). A one-line error when it is missing.
Result<std::string> load_plotly_js();

}  // namespace ib
