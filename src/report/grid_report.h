// Sweep outputs drawn from numbers alone: a grid heatmap (batch x input length, one value per
// cell, OOM cells hatched) as SVG, a line chart (the OOM search's headroom curve) as SVG, and
// one offline HTML page with both heatmaps as Plotly figures plus the grid table.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ib {

struct GridHeatmap {
  std::string title;                        // "Output throughput"
  std::string unit;                         // "tok/s"
  std::vector<std::string> row_labels;      // (rows): batch sizes, top to bottom
  std::vector<std::string> col_labels;      // (cols): input lengths, left to right
  std::vector<std::vector<double>> values;  // (rows, cols); NaN: no value (not run)
  std::vector<std::vector<bool>> oom;       // (rows, cols): drawn hatched, labelled "OOM"
};

std::string grid_heatmap_svg(const GridHeatmap& heatmap);

struct LineSeries {
  std::string name;
  std::vector<double> x;
  std::vector<double> y;
};
std::string line_chart_svg(const std::string& title, const std::string& x_label,
                           const std::string& y_label, const std::vector<LineSeries>& series,
                           double y_line = 0, const std::string& y_line_label = "");

// cells: the grid's cell objects (grid.json "cells"), shown as a table.
std::string grid_report_html(const std::string& title, const std::string& subtitle,
                             const std::vector<GridHeatmap>& heatmaps, const nlohmann::json& cells,
                             const std::string& plotly_js);

}  // namespace ib
