// The cross-run heatmap: phases of recordings on a uniform frame grid, drawn as SVG (viridis,
// colour bar, ticks, crisp cell edges).
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "core/text.h"
#include "report/detail/viridis.h"
#include "report/memory_report.h"

namespace ib {
namespace {

using detail::kViridis;
using detail::viridis_hex;

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// A 1-2-5 step that puts about five ticks on [0, span].
double nice_step(double span) {
  if (!(span > 0)) return 1;
  const double raw = span / 5;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  const double norm = raw / mag;
  return (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * mag;
}

std::string truncate(const std::string& s, size_t n) {
  // Counts bytes; the "·" separator is two bytes, which only shortens the visible text.
  return s.size() <= n ? s : s.substr(0, n - 3) + "...";
}

// The series a recording's rows draw, with their row labels' middle part: its heatmap column,
// or, where that is the engine's demand of a tensor-parallel run, each rank's
// (rank<r>_demand_bytes, "rank r"). Empty when the recording lacks the column.
std::vector<std::pair<int, std::string>> heatmap_series(const MemoryRecording& r) {
  std::vector<std::pair<int, std::string>> out;
  if (r.heatmap_column == "engine_demand_bytes") {
    for (int rank = 0;; ++rank) {
      const int col = r.timeline.column(fmt::format("rank{}_demand_bytes", rank));
      if (col < 0) break;
      out.emplace_back(col, fmt::format("rank {} · ", rank));
    }
    if (!out.empty()) return out;
  }
  const int col = r.timeline.column(r.heatmap_column);
  if (col >= 0) out.emplace_back(col, "");
  return out;
}

}  // namespace

Heatmap build_heatmap(const std::vector<MemoryRecording>& recordings, int frames) {
  Heatmap h;
  h.frames = std::max(1, frames);
  int64_t longest_ns = 1;
  for (const auto& r : recordings) {
    if (heatmap_series(r).empty()) continue;
    for (const auto& p : r.phases) longest_ns = std::max(longest_ns, p.end_ns - p.start_ns);
  }
  const double frame_ns = static_cast<double>(longest_ns) / h.frames;
  h.frame_s = frame_ns / 1e9;
  for (const auto& r : recordings) {
    const auto series = heatmap_series(r);
    if (series.empty()) continue;
    if (h.caption.empty()) {
      h.caption = heatmap_caption(r.heatmap_column);
      if (!series.front().second.empty()) h.caption += ", one row per tensor-parallel rank";
    }
    for (const auto& [col, middle] : series) {
      for (const auto& p : r.phases) {
        HeatmapRow row;
        row.label = r.label + " · " + middle + p.name;
        row.model = r.label;
        for (int f = 0; f < h.frames; ++f) {
          const auto t = p.start_ns + static_cast<int64_t>((f + 0.5) * frame_ns);
          const bool inside = t <= p.end_ns;
          const double v = inside ? r.timeline.value_at(col, t) / kGiB : kNaN;
          row.gib.push_back(v);
          std::string step;
          if (inside) {
            const auto& ts = r.timeline.time_ns;
            const auto k =
                static_cast<size_t>(std::lower_bound(ts.begin(), ts.end(), t) - ts.begin());
            if (k < r.sample_step.size()) step = " · " + r.sample_step[k];
          }
          row.detail.push_back(inside ? middle + p.name + step : "");
          if (std::isfinite(v)) h.zmax_gib = std::max(h.zmax_gib, v);
        }
        h.rows.push_back(std::move(row));
      }
    }
  }
  if (!(h.zmax_gib > 0)) h.zmax_gib = 1;
  return h;
}

std::string heatmap_svg(const Heatmap& h, const std::string& title) {
  constexpr int kWidth = 960;
  constexpr int kLeft = 200;
  constexpr int kRight = 130;
  constexpr int kTop = 50;
  const int rows = std::max<int>(1, static_cast<int>(h.rows.size()));
  const int row_h = std::clamp(360 / rows, 10, 28);
  const int plot_h = std::max(rows * row_h, 120);
  const int plot_w = kWidth - kLeft - kRight;
  const int height = kTop + plot_h + 84;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} "
      "{1}\" font-family=\"sans-serif\" font-size=\"11\">\n",
      kWidth, height);
  s += fmt::format("<rect width=\"{}\" height=\"{}\" fill=\"white\"/>\n", kWidth, height);
  s += fmt::format("<text x=\"{}\" y=\"24\" font-size=\"15\" font-weight=\"bold\">{}</text>\n",
                   kLeft, escape_markup(title));

  // Cells: integer edges so neighbours meet without anti-aliasing seams.
  s += "<g shape-rendering=\"crispEdges\">\n";
  const double cell_w = static_cast<double>(plot_w) / h.frames;
  for (size_t r = 0; r < h.rows.size(); ++r) {
    const int y = kTop + static_cast<int>(r) * row_h;
    for (int f = 0; f < h.frames; ++f) {
      const double v = h.rows[r].gib[static_cast<size_t>(f)];
      if (!std::isfinite(v)) continue;
      const auto x0 = static_cast<int>(std::lround(kLeft + f * cell_w));
      const auto x1 = static_cast<int>(std::lround(kLeft + (f + 1) * cell_w));
      s += fmt::format("<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\"/>\n", x0, y,
                       x1 - x0, row_h, viridis_hex(v / h.zmax_gib));
    }
  }
  s += "</g>\n";
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"none\" stroke=\"#888\"/>\n", kLeft,
      kTop, plot_w, rows * row_h);

  // Row labels (full text in a native tooltip).
  for (size_t r = 0; r < h.rows.size(); ++r) {
    const int y = kTop + static_cast<int>(r) * row_h + row_h / 2 + 4;
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\"><title>{}</title>{}</text>\n",
                     kLeft - 6, y, escape_markup(h.rows[r].label),
                     escape_markup(truncate(h.rows[r].label, 34)));
  }

  // Time axis.
  const double span_s = h.frame_s * h.frames;
  const double step_s = nice_step(span_s);
  const int axis_y = kTop + rows * row_h;
  for (double t = 0; t <= span_s + 1e-9; t += step_s) {
    const auto x = static_cast<int>(std::lround(kLeft + t / span_s * plot_w));
    s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"#444\"/>\n", x,
                     axis_y, axis_y + 5);
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{:g}</text>\n", x, axis_y + 17,
                     t);
  }
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">time since the phase started (s)</text>\n",
      kLeft + plot_w / 2, axis_y + 33);
  s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">{}</text>\n", kLeft, axis_y + 52,
                   escape_markup(h.caption));
  s += fmt::format(
      "<text x=\"{}\" y=\"{}\" fill=\"#555\">linear interpolation onto {:.3g} s frames; one colour "
      "scale for every row; blank: the phase had ended</text>\n",
      kLeft, axis_y + 67, h.frame_s);

  // Colour bar: 0 at the bottom, the largest value of any row at the top.
  const int bar_x = kLeft + plot_w + 36;
  const int bar_h = std::max(rows * row_h, 120);
  s += "<defs><linearGradient id=\"viridis\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">";
  for (size_t i = 0; i < kViridis.size(); ++i) {
    s += fmt::format("<stop offset=\"{:.3f}\" stop-color=\"#{:06x}\"/>",
                     static_cast<double>(i) / (kViridis.size() - 1), kViridis[i]);
  }
  s += "</linearGradient></defs>\n";
  s += fmt::format(
      "<rect x=\"{}\" y=\"{}\" width=\"16\" height=\"{}\" fill=\"url(#viridis)\" "
      "stroke=\"#888\"/>\n",
      bar_x, kTop, bar_h);
  s += fmt::format("<text x=\"{}\" y=\"{}\" font-weight=\"bold\">GiB</text>\n", bar_x, kTop - 8);
  const double zstep = nice_step(h.zmax_gib);
  for (double z = 0; z <= h.zmax_gib + 1e-12; z += zstep) {
    const auto y = static_cast<int>(std::lround(kTop + bar_h - z / h.zmax_gib * bar_h));
    s += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"#444\"/>\n",
                     bar_x + 16, y, bar_x + 20);
    s += fmt::format("<text x=\"{}\" y=\"{}\">{:g}</text>\n", bar_x + 23, y + 4, z);
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"#555\">max {:.3g}</text>\n", bar_x - 4,
                   kTop + bar_h + 16, h.zmax_gib);
  s += "</svg>\n";
  return s;
}

}  // namespace ib
