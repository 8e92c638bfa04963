// `inferbench sweep`: every cell planned up front, the grid's duration estimated from a
// calibration probe and refused beyond the limit, then the cells run one by one through
// execute_run (each a normal result directory), grid.csv / grid.json rewritten after each.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/fs.h"
#include "orchestrate/detail/sweep_estimate.h"
#include "orchestrate/detail/sweep_grid.h"
#include "orchestrate/orchestrate.h"
#include "report/memory_report.h"
#include "report/report.h"
#include "telemetry/env.h"

namespace ib {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

std::string human_s(double s) {
  if (s < 120) return fmt::format("{:.0f}s", s);
  if (s < 7200) return fmt::format("{:.1f}m", s / 60);
  return fmt::format("{:.1f}h", s / 3600);
}

Status write_outputs(const fs::path& dir, const json& grid, const std::vector<int>& batches,
                     const std::vector<int>& lens) {
  IB_TRY(write_file_atomic(dir / "grid.json", grid.dump(2) + "\n"));
  IB_TRY(write_file_atomic(dir / "grid.csv", detail::grid_csv(grid["cells"])));
  const auto maps = detail::grid_heatmaps(grid["cells"], batches, lens);
  IB_TRY(write_file_atomic(dir / "grid_throughput.svg", grid_heatmap_svg(maps[0])));
  IB_TRY(write_file_atomic(dir / "grid_peak_memory.svg", grid_heatmap_svg(maps[1])));
  return Ok{};
}

// The base config with the cell's batch, input length, prompts, sequence cap and directory.
Result<RunConfig> cell_config(const SweepConfig& s, int batch, int len) {
  RunConfig c = s.base;
  c.runner.batch_size = batch;
  c.workload.num_prompts = s.num_prompts > 0 ? s.num_prompts : batch;
  c.workload.input_len = LengthDist::fixed(len);
  if (!s.input_len_dist.empty()) {
    std::string dist = s.input_len_dist;
    for (size_t p; (p = dist.find("{L}")) != std::string::npos;) {
      dist.replace(p, 3, std::to_string(len));
    }
    IB_ASSIGN_OR_RETURN(c.workload.input_len, parse_length_dist(dist, "--input-len-dist"));
  }
  c.target.native.engine.max_num_seqs = std::max(256, batch);
  c.result_dir = s.dir / "cells" / detail::cell_name(batch, len);
  c.overwrite = true;
  return c;
}

}  // namespace

Result<std::vector<SweepCell>> plan_sweep(const SweepConfig& s, const PluginRegistry& registry) {
  std::vector<SweepCell> cells;
  for (int b : s.batch_sizes) {
    for (int l : s.input_lens) {
      IB_ASSIGN_OR_RETURN(const RunConfig config, cell_config(s, b, l));
      IB_ASSIGN_OR_RETURN(RunPlan plan, plan_run(config, registry));
      cells.push_back(SweepCell{b, l, std::move(plan)});
    }
  }
  return cells;
}

Result<Outcome> execute_sweep(const SweepConfig& s, const std::vector<SweepCell>& cells,
                              const PluginRegistry& registry, const std::atomic<bool>& stop) {
  const fs::path& dir = s.dir;
  const std::vector<int>& batches = s.batch_sizes;
  const std::vector<int>& lens = s.input_lens;
  IB_TRY(detail::create_sweep_dir(dir));

  json grid = json{{"model", s.model}, {"cells", json::array()}};
  if (fs::exists(dir / "grid.json") && !s.resume && !s.overwrite) {
    return user_error(
        fmt::format("{} already holds a grid; add --resume to continue it or "
                    "--overwrite to start over",
                    dir.string()));
  }
  json previous = json::array();
  if (s.resume && fs::exists(dir / "grid.json")) {
    IB_ASSIGN_OR_RETURN(const std::string text, read_file(dir / "grid.json"));
    const json old = json::parse(text, nullptr, false);
    if (old.is_discarded() || !old.contains("cells")) {
      return user_error(
          fmt::format("{}/grid.json is not a grid; remove it or drop --resume", dir.string()));
    }
    previous = old["cells"];
  }
  auto done_before = [&](int b, int l) -> json {
    for (const auto& c : previous) {
      if (c["batch_size"] == b && c["input_len"] == l &&
          (c["status"] == "ok" || c["status"] == "oom")) {
        return c;
      }
    }
    return nullptr;
  };
  std::vector<const SweepCell*> todo;
  for (const SweepCell& c : cells) {
    const json old = done_before(c.batch, c.input_len);
    grid["cells"].push_back(old.is_null() ? detail::pending_cell(c.batch, c.input_len) : old);
    if (old.is_null()) todo.push_back(&c);
  }
  json est = nullptr;
  if (!todo.empty()) {
    std::vector<SweepCell> pending;
    for (const SweepCell* c : todo) pending.push_back(*c);
    IB_ASSIGN_OR_RETURN(est, detail::estimate_grid_s(pending, lens, s.output_len));
    const double e = est["estimated_s"].get<double>();
    std::fprintf(stderr, "inferbench: sweep of %zu cells estimated at %s (%s)\n", todo.size(),
                 human_s(e).c_str(), est["method"].get<std::string>().c_str());
    if (e > s.max_duration_s) {
      return user_error(fmt::format(
          "the grid of {} cells is estimated at {} ({}), beyond --max-duration {}; raise "
          "--max-duration or use fewer/smaller cells",
          todo.size(), human_s(e), est["method"].get<std::string>(), s.max_duration));
    }
  }
  grid["config"] = s.config;
  grid["env"] = environment_fingerprint();
  grid["estimate"] = est;
  IB_TRY(write_outputs(dir, grid, batches, lens));

  const int64_t t0 = now_ns();
  int done = 0;
  bool interrupted = false;
  for (const SweepCell* c : todo) {
    if (stop.load()) {
      interrupted = true;
      break;
    }
    const double elapsed = static_cast<double>(now_ns() - t0) * 1e-9;
    const std::string eta =
        done > 0
            ? human_s(elapsed / done * static_cast<double>(todo.size() - static_cast<size_t>(done)))
            : "?";
    std::fprintf(stderr, "inferbench: sweep cell %d/%zu (batch %d, input %d), ETA %s\n", done + 1,
                 todo.size(), c->batch, c->input_len, eta.c_str());
    std::ostringstream cell_out;  // each cell's own table goes to its result directory only
    std::streambuf* old_buf = std::cout.rdbuf(cell_out.rdbuf());
    auto code = execute_run(c->plan, registry, stop);
    std::cout.rdbuf(old_buf);
    json cell;
    const fs::path result = c->plan.result_dir / kResultJson;
    if (code.ok() && fs::exists(result)) {
      IB_ASSIGN_OR_RETURN(const std::string text, read_file(result));
      cell = detail::cell_from_result(c->batch, c->input_len, json::parse(text, nullptr, false));
      if (*code == Outcome::kInterrupted) cell["status"] = "interrupted";
    } else {
      cell = detail::pending_cell(c->batch, c->input_len);
      const std::string msg = code.ok() ? "no result.json" : code.error().message;
      const bool oom = msg.find("out of memory") != std::string::npos ||
                       msg.find("no memory left") != std::string::npos ||
                       msg.find("the memory limit allows") != std::string::npos;
      cell["status"] = oom ? "oom" : "error";
      cell["oom"] = oom;
      if (oom) cell["steps_before_oom"] = 0;
      cell["message"] = msg;
    }
    cell["result_dir"] = c->plan.result_dir.string();
    for (auto& g : grid["cells"]) {
      if (g["batch_size"] == c->batch && g["input_len"] == c->input_len) g = cell;
    }
    IB_TRY(write_outputs(dir, grid, batches, lens));
    ++done;
    if (code.ok() && *code == Outcome::kInterrupted) {
      interrupted = true;
      break;
    }
  }
  grid["elapsed_s"] = static_cast<double>(now_ns() - t0) * 1e-9;
  IB_TRY(write_outputs(dir, grid, batches, lens));
  if (auto plotly = load_plotly_js(); plotly.ok()) {
    const auto maps = detail::grid_heatmaps(grid["cells"], batches, lens);
    IB_TRY(write_file_atomic(dir / "report.html",
                             grid_report_html("Sweep: " + s.model,
                                              fmt::format("{} on {}, output {} tokens", s.model,
                                                          s.base.device, s.output_len),
                                              maps, grid["cells"], *plotly)));
  } else {
    std::fprintf(stderr, "inferbench: report.html not written: %s\n",
                 plotly.error().message.c_str());
  }
  std::cout << detail::grid_markdown(grid["cells"]);
  std::fprintf(stderr, "inferbench: grid.csv, grid.json, grid_*.svg, report.html in %s\n",
               dir.string().c_str());
  return interrupted ? Outcome::kInterrupted : Outcome::kOk;
}

}  // namespace ib
