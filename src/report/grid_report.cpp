// Sweep drawings: grid heatmaps and the headroom line chart as SVG, and the sweep's HTML page.
#include "report/grid_report.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

#include <fmt/format.h>

#include "core/text.h"
#include "report/detail/viridis.h"

namespace ib {
namespace {

using detail::viridis_hex;
using nlohmann::json;

std::string short_number(double v) {
  if (!std::isfinite(v)) return "";
  const double a = std::fabs(v);
  if (a >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (a >= 1e4) return fmt::format("{:.3g}k", v / 1e3);
  if (a >= 100) return fmt::format("{:.0f}", v);
  return fmt::format("{:.3g}", v);
}

std::string js_safe(std::string s) {
  for (size_t pos = 0; (pos = s.find("</", pos)) != std::string::npos; pos += 3) {
    s.replace(pos, 2, "<\\/");
  }
  return s;
}

}  // namespace

std::string grid_heatmap_svg(const GridHeatmap& h) {
  constexpr int kCell = 72, kLeft = 90, kTop = 48, kBottom = 56;
  const int rows = static_cast<int>(h.row_labels.size());
  const int cols = static_cast<int>(h.col_labels.size());
  double vmax = 0;
  for (const auto& row : h.values)
    for (double v : row)
      if (std::isfinite(v)) vmax = std::max(vmax, v);
  const int title_px = 9 * static_cast<int>(h.title.size() + h.unit.size() + 3);
  const int width = std::max(kLeft + cols * kCell + 20, kLeft + title_px);
  const int height = kTop + rows * kCell + kBottom;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<defs><pattern id=\"hatch\" width=\"8\" height=\"8\" patternUnits=\"userSpaceOnUse\">"
      "<path d=\"M0,8 L8,0\" stroke=\"#b00\" stroke-width=\"1.5\"/></pattern></defs>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"20\" font-size=\"15\">{} ({})</text>\n",
      width, height, kLeft, escape_markup(h.title), escape_markup(h.unit));
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const double v = h.values[static_cast<size_t>(r)][static_cast<size_t>(c)];
      const bool oom = !h.oom.empty() && h.oom[static_cast<size_t>(r)][static_cast<size_t>(c)];
      const int x = kLeft + c * kCell, y = kTop + r * kCell;
      const double frac = vmax > 0 && std::isfinite(v) ? v / vmax : 0.0;
      const std::string fill = oom ? "url(#hatch)" : std::isfinite(v) ? viridis_hex(frac) : "#ddd";
      s += fmt::format(
          "<rect x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" fill=\"{}\" stroke=\"white\">"
          "<title>batch {}, input {}: {} {}</title></rect>\n",
          x, y, kCell, kCell, fill, escape_markup(h.row_labels[static_cast<size_t>(r)]),
          escape_markup(h.col_labels[static_cast<size_t>(c)]), oom ? "OOM" : short_number(v),
          escape_markup(h.unit));
      const std::string label = oom ? "OOM" : short_number(v);
      s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\" fill=\"{}\">{}</text>\n",
                       x + kCell / 2, y + kCell / 2 + 4, oom || frac > 0.6 ? "black" : "white",
                       label);
    }
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n", kLeft - 8,
                     kTop + r * kCell + kCell / 2 + 4,
                     escape_markup(h.row_labels[static_cast<size_t>(r)]));
  }
  for (int c = 0; c < cols; ++c) {
    s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n",
                     kLeft + c * kCell + kCell / 2, kTop + rows * kCell + 18,
                     escape_markup(h.col_labels[static_cast<size_t>(c)]));
  }
  s += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">input length (tokens)</text>\n",
                   kLeft + cols * kCell / 2, kTop + rows * kCell + 40);
  s += fmt::format(
      "<text x=\"16\" y=\"{}\" transform=\"rotate(-90 16 {})\" "
      "text-anchor=\"middle\">batch size</text>\n",
      kTop + rows * kCell / 2, kTop + rows * kCell / 2);
  return s + "</svg>\n";
}

std::string line_chart_svg(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<LineSeries>& series,
                           double y_line, const std::string& y_line_label) {
  constexpr int kW = 640, kH = 360, kLeft = 80, kRight = 160, kTop = 40, kBottom = 50;
  double xmax = 0, ymax = y_line;
  for (const auto& sr : series) {
    for (double x : sr.x) xmax = std::max(xmax, x);
    for (double y : sr.y) ymax = std::max(ymax, y);
  }
  xmax = xmax > 0 ? xmax : 1;
  ymax = ymax > 0 ? ymax * 1.05 : 1;
  const double pw = kW - kLeft - kRight, ph = kH - kTop - kBottom;
  auto px = [&](double x) { return kLeft + x / xmax * pw; };
  auto py = [&](double y) { return kTop + ph - y / ymax * ph; };
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" "
      "font-family=\"sans-serif\" font-size=\"12\">\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
      "<text x=\"{}\" y=\"22\" font-size=\"15\">{}</text>\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n"
      "<line x1=\"{}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>\n",
      kW, kH, kLeft, escape_markup(title), kLeft, kTop + ph, kLeft + pw, kTop + ph, kLeft, kTop,
      kLeft, kTop + ph);
  for (int i = 0; i <= 4; ++i) {
    const double xv = xmax * i / 4, yv = ymax * i / 4;
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(xv),
                     kTop + ph + 16, short_number(xv));
    s += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 6,
                     py(yv) + 4, short_number(yv));
  }
  s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", kLeft + pw / 2,
                   kH - 10, escape_markup(x_label));
  s += fmt::format(
      "<text x=\"16\" y=\"{:.1f}\" transform=\"rotate(-90 16 {:.1f})\" "
      "text-anchor=\"middle\">{}</text>\n",
      kTop + ph / 2, kTop + ph / 2, escape_markup(y_label));
  if (y_line > 0) {
    s += fmt::format(
        "<line x1=\"{}\" y1=\"{:.1f}\" x2=\"{:.1f}\" y2=\"{:.1f}\" stroke=\"#b00\" "
        "stroke-dasharray=\"6 4\"/><text x=\"{:.1f}\" y=\"{:.1f}\" fill=\"#b00\">{}</text>\n",
        kLeft, py(y_line), kLeft + pw, py(y_line), kLeft + 6.0, py(y_line) - 6,
        escape_markup(y_line_label));
  }
  const std::array<const char*, 6> palette = {"#1f77b4", "#ff7f0e", "#2ca02c",
                                              "#9467bd", "#8c564b", "#e377c2"};
  for (size_t k = 0; k < series.size(); ++k) {
    const auto& sr = series[k];
    const char* c = palette[k % palette.size()];
    std::string points;
    for (size_t i = 0; i < sr.x.size() && i < sr.y.size(); ++i) {
      points += fmt::format("{:.1f},{:.1f} ", px(sr.x[i]), py(sr.y[i]));
      s += fmt::format("<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" fill=\"{}\"/>\n", px(sr.x[i]),
                       py(sr.y[i]), c);
    }
    s += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"{}\"/>\n", points, c);
    s += fmt::format("<text x=\"{:.1f}\" y=\"{}\" fill=\"{}\">{}</text>\n", kLeft + pw + 6,
                     kTop + 14 + 16 * static_cast<int>(k), c, escape_markup(sr.name));
  }
  return s + "</svg>\n";
}

std::string grid_report_html(const std::string& title, const std::string& subtitle,
                             const std::vector<GridHeatmap>& heatmaps, const json& cells,
                             const std::string& plotly_js) {
  json figures = json::array();
  for (const auto& h : heatmaps) {
    json z = json::array(), text = json::array();
    for (size_t r = 0; r < h.values.size(); ++r) {
      json zr = json::array(), tr = json::array();
      for (size_t c = 0; c < h.values[r].size(); ++c) {
        const double v = h.values[r][c];
        const bool oom = !h.oom.empty() && h.oom[r][c];
        zr.push_back(std::isfinite(v) && !oom ? json(v) : json(nullptr));
        tr.push_back(oom ? "OOM" : short_number(v));
      }
      z.push_back(zr);
      text.push_back(tr);
    }
    figures.push_back(json{{"title", h.title + " (" + h.unit + ")"},
                           {"x", h.col_labels},
                           {"y", h.row_labels},
                           {"z", z},
                           {"text", text}});
  }
  std::string html =
      "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>" + escape_markup(title) +
      "</title>\n<style>body{font-family:sans-serif;margin:24px}table{border-collapse:collapse;"
      "font-size:13px}td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
      ".fig{width:640px;height:480px;display:inline-block}</style>\n";
  html += "<script>" + js_safe(plotly_js) + "</script>\n</head><body>\n";
  html += "<h1>" + escape_markup(title) + "</h1>\n<p>" + escape_markup(subtitle) + "</p>\n";
  for (size_t i = 0; i < heatmaps.size(); ++i) {
    html += fmt::format("<div class=\"fig\" id=\"grid{}\"></div>\n", i);
  }
  html += "<h2>Cells</h2>\n<table id=\"cells\"></table>\n<script>\nconst figures = " +
          js_safe(figures.dump()) + ";\nconst cells = " + js_safe(cells.dump()) + ";\n";
  html += R"(figures.forEach((f, i) => {
  Plotly.newPlot('grid' + i, [{type: 'heatmap', x: f.x.map(String), y: f.y.map(String), z: f.z,
    text: f.text, texttemplate: '%{text}', colorscale: 'Viridis', hoverongaps: false}],
    {title: f.title, xaxis: {title: 'input length (tokens)', type: 'category'},
     yaxis: {title: 'batch size', type: 'category', autorange: 'reversed'}});
});
const cols = ['batch_size', 'input_len', 'status', 'output_throughput', 'total_token_throughput',
  'p50_ttft_ms', 'p99_ttft_ms', 'p50_tpot_ms', 'p99_tpot_ms', 'step_jitter_ms',
  'peak_demand_bytes', 'peak_allocated_bytes', 'fragmentation', 'oom', 'steps_before_oom', 'preemptions'];
const table = document.getElementById('cells');
table.insertRow().innerHTML = cols.map(c => '<th>' + c + '</th>').join('');
cells.forEach(c => {
  table.insertRow().innerHTML = cols.map(k => {
    const v = c[k];
    return '<td>' + (typeof v === 'number' ? +v.toPrecision(4) : (v === null || v === undefined ? '' : v)) + '</td>';
  }).join('');
});
</script>
</body></html>
)";
  return html;
}

}  // namespace ib
