// `inferbench plot DIR... --out FILE`: the cross-run memory heatmap of many result directories,
// as SVG or as a self-contained HTML report (by the extension of FILE).
#include <unistd.h>

#include <cstdio>

#include <fmt/format.h>

#include "cli/commands.h"
#include "core/fs.h"
#include "report/report.h"

namespace ib {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

Result<std::string> output_kind(const std::string& out) {
  const std::string ext = fs::path(out).extension().string();
  if (ext == ".svg" || ext == ".html") return ext.substr(1);
  return user_error(fmt::format(
      "--out {}: write a .svg or a .html file (the format follows the extension)", out));
}

// The output must be creatable: checked before any directory is read.
Status check_output(const std::string& out) {
  std::error_code ec;
  if (fs::is_directory(out, ec)) {
    return user_error(fmt::format("--out {} is a directory; name a file", out));
  }
  if (fs::exists(out, ec) && ::access(out.c_str(), W_OK) != 0) {
    return user_error(fmt::format("--out {}: the file is not writable; choose another path", out));
  }
  // The nearest existing ancestor must be a writable directory (missing ones are created).
  fs::path p = fs::absolute(fs::path(out)).parent_path();
  while (!p.empty() && !fs::exists(p, ec)) p = p.parent_path();
  if (!fs::is_directory(p, ec) || ::access(p.c_str(), W_OK) != 0) {
    return user_error(
        fmt::format("--out {}: cannot write under {}; choose another path", out, p.string()));
  }
  return Ok{};
}

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

Result<int> execute_plot(const PlotFlags& flags) {
  IB_ASSIGN_OR_RETURN(const std::string kind, output_kind(flags.out));
  IB_TRY(check_output(flags.out));
  if (flags.frames < 2 || flags.frames > 2000) {
    return user_error(fmt::format("--frames {} must be in [2, 2000]", flags.frames));
  }
  std::string plotly;
  if (kind == "html") {
    auto js = load_plotly_js();
    if (!js.ok()) return runtime_error(js.error().message);
    plotly = std::move(js).value();
  }
  std::vector<MemoryRecording> recordings;
  std::vector<std::string> without;
  for (const auto& dir : flags.dirs) {
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
  const Heatmap heatmap = build_heatmap(recordings, flags.frames);
  const std::string title = fmt::format("Memory over time, {} result(s)", recordings.size());
  if (const auto parent = fs::path(flags.out).parent_path(); !parent.empty()) {
    std::error_code ec;
    fs::create_directories(parent, ec);
  }
  if (kind == "svg") {
    IB_TRY(write_file_atomic(flags.out, heatmap_svg(heatmap, title)));
  } else {
    HtmlReport html;
    html.title = title;
    html.subtitle = "inferbench plot";
    html.heatmap = heatmap;
    html.recordings = recordings;
    IB_TRY(write_file_atomic(flags.out, report_html(html, plotly)));
  }
  std::fprintf(stderr, "inferbench: wrote %s (%zu rows)\n", flags.out.c_str(), heatmap.rows.size());
  return kExitOk;
}

}  // namespace ib
