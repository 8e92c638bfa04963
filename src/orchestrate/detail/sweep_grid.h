// Internal to orchestrate/: the sweep grid — one cell per (batch size, input length), its numbers
// read back from the cell's result.json, and the grid's outputs (grid.csv, grid.json, the Markdown
// table, the heatmaps).
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "report/grid_report.h"

namespace ib::detail {

// A cell's directory under DIR/cells/: "b8-in256".
std::string cell_name(int batch, int input_len);
// The sweep's directory, created with its parents (a user error names --result-dir).
Status create_sweep_dir(const std::filesystem::path& dir);

// A cell's row of grid.csv / grid.json. status: "ok", "oom", "error", "interrupted", "pending".
nlohmann::json cell_from_result(int batch, int input_len, const nlohmann::json& result);
nlohmann::json pending_cell(int batch, int input_len);

std::string grid_csv(const nlohmann::json& cells);
std::string grid_markdown(const nlohmann::json& cells);
// Throughput and peak memory over batch (rows) x input length (columns).
std::vector<GridHeatmap> grid_heatmaps(const nlohmann::json& cells, const std::vector<int>& batches,
                                       const std::vector<int>& input_lens);

}  // namespace ib::detail
