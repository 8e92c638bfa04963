// The cross-run memory heatmap of many result directories, as SVG or as a self-contained HTML
// report (by the extension of the output file), and a run's expert-load heatmap drawn again.
#include <cstdio>

#include <fmt/format.h>

#include "core/fs.h"
#include "orchestrate/orchestrate.h"
#include "report/report.h"
#include "report/routing_report.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// One result directory's recording; nullopt when it has no memory samples.
Result<std::optional<MemoryRecording>> load_recording(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return user_error(fmt::format("{} is not a directory; pass result directories", dir.string()));
  }
  auto csv = read_file(dir / kMemoryCsv);
  if (!csv.ok()) return std::optional<MemoryRecording>{};
  IB_ASSIGN_OR_RETURN(MemoryRecording r, parse_memory_csv(*csv));
  if (r.timeline.rows.empty()) return std::optional<MemoryRecording>{};
  const std::string name = fs::path(dir).lexically_normal().filename().string();
  r.label = name.empty() ? dir.string() : name;
  json result = nullptr;
  if (auto text = read_file(dir / kResultJson); text.ok()) {
    result = json::parse(*text, nullptr, false);
  }
  if (result.is_object()) {
    const std::string model = result.value("model_id", "");
    if (!model.empty() && model != r.label) r.label = model + " (" + r.label + ")";
    const json& memory = result.value("memory", json::object());
    if (memory.contains("phases")) {
      for (const auto& p : memory["phases"]) {
        r.phases.push_back({p["name"].get<std::string>(), p["start_ns"].get<int64_t>(),
                            p["end_ns"].get<int64_t>()});
      }
    }
    if (memory.contains("heatmap")) r.heatmap_column = memory["heatmap"].value("column", "");
  }
  if (r.heatmap_column.empty() || r.timeline.column(r.heatmap_column) < 0) {
    r.heatmap_column = heatmap_metric(r.timeline, "").column;
  }
  if (r.phases.empty())
    r.phases.push_back({"all", r.timeline.time_ns.front(), r.timeline.time_ns.back()});
  return std::optional<MemoryRecording>{std::move(r)};
}

}  // namespace

Status write_memory_heatmap(const std::vector<std::string>& dirs, const std::string& out,
                            int frames) {
  const bool html = fs::path(out).extension() == ".html";
  std::string plotly;
  if (html) {
    auto js = load_plotly_js();
    if (!js.ok()) return runtime_error(js.error().message);
    plotly = std::move(js).value();
  }
  std::vector<MemoryRecording> recordings;
  std::vector<std::string> without;
  for (const auto& dir : dirs) {
    IB_ASSIGN_OR_RETURN(auto r, load_recording(dir));
    if (r) {
      recordings.push_back(std::move(*r));
    } else {
      without.push_back(dir);
    }
  }
  std::string missing;
  for (const auto& d : without) missing += (missing.empty() ? "" : ", ") + d;
  if (recordings.empty()) {
    return user_error(
        fmt::format("no memory samples ({}) in {}; run inferbench run without "
                    "--disable-telemetry first",
                    kMemoryCsv, missing));
  }
  if (!without.empty()) {
    std::fprintf(stderr, "inferbench: plot: no memory samples in %s; drawing the other %zu\n",
                 missing.c_str(), recordings.size());
  }
  const Heatmap heatmap = build_heatmap(recordings, frames);
  const std::string title = fmt::format("Memory over time, {} result(s)", recordings.size());
  if (const auto parent = fs::path(out).parent_path(); !parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
  }
  if (!html) {
    IB_TRY(write_file_atomic(out, heatmap_svg(heatmap, title)));
  } else {
    HtmlReport page;
    page.title = title;
    page.subtitle = "inferbench plot";
    page.heatmap = heatmap;
    page.recordings = recordings;
    IB_TRY(write_file_atomic(out, report_html(page, plotly)));
  }
  std::fprintf(stderr, "inferbench: wrote %s (%zu rows)\n", out.c_str(), heatmap.rows.size());
  return Ok{};
}

Status write_expert_load(const std::string& dir, const std::string& out) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    return user_error(fmt::format("{} is not a directory; pass a result directory", dir));
  }
  auto text = read_file(fs::path(dir) / kResultJson);
  if (!text.ok()) {
    return user_error(
        fmt::format("{} has no readable {}; pass a result directory", dir, kResultJson));
  }
  const json result = json::parse(*text, nullptr, false);
  const json routing =
      result.is_object() ? result.value("engine", json::object()).value("routing", json()) : json();
  const std::string model = result.is_object() ? result.value("model_id", dir) : dir;
  const std::string svg = expert_load_svg(routing, "Expert load: " + model);
  if (svg.empty()) {
    return user_error(
        fmt::format("{}'s {} has no routing counts (engine.routing): not a mixture-of-experts run",
                    dir, kResultJson));
  }
  if (const auto parent = fs::path(out).parent_path(); !parent.empty()) {
    fs::create_directories(parent, ec);
  }
  return write_file_atomic(out, svg);
}

}  // namespace ib
