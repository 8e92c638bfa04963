// `inferbench sweep`: validates every cell up front, estimates the grid's duration from a
// calibration probe and refuses beyond --max-duration, then runs the cells one by one through
// execute_run (each a normal result directory) and rewrites grid.csv / grid.json after each.
#include "cli/sweep_command.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/detail/sweep_estimate.h"
#include "cli/detail/sweep_grid.h"
#include "cli/detail/sweep_probe.h"
#include "core/clock.h"
#include "core/fs.h"
#include "report/memory_report.h"
#include "report/report.h"
#include "telemetry/env.h"

namespace ib {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

Result<std::vector<int>> parse_list(const std::string& text, const char* flag) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > (1 << 24)) {
      return user_error(
          fmt::format("{} {}: write positive integers separated by commas", flag, text));
    }
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return user_error(fmt::format("{}: give at least one value", flag));
  return out;
}

// "90s", "30m", "2h", "1.5h" -> seconds.
Result<double> parse_duration_s(const std::string& text) {
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  const std::string unit(end);
  const double scale = unit == "s" || unit.empty() ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : 0;
  if (end == text.c_str() || scale == 0 || !(v > 0)) {
    return user_error(fmt::format("--max-duration {}: write e.g. 90s, 30m or 2h", text));
  }
  return v * scale;
}

std::string human_s(double s) {
  if (s < 120) return fmt::format("{:.0f}s", s);
  if (s < 7200) return fmt::format("{:.1f}m", s / 60);
  return fmt::format("{:.1f}h", s / 3600);
}

std::string cell_name(int batch, int len) {
  return fmt::format("b{}-in{}", batch, len);
}

using Cell = detail::SweepCell;

RunFlags cell_flags(const SweepFlags& s, int batch, int len, const fs::path& dir) {
  RunFlags f;
  f.model = s.model;
  f.batch_size = batch;
  f.input_len = len;
  f.output_len = s.output_len;
  if (!s.input_len_dist.empty()) {
    f.input_len_dist = s.input_len_dist;
    for (size_t p; (p = f.input_len_dist.find("{L}")) != std::string::npos;) {
      f.input_len_dist.replace(p, 3, std::to_string(len));
    }
  }
  f.num_prompts = s.num_prompts > 0 ? s.num_prompts : batch;
  f.runs = s.runs;
  f.num_warmups = s.num_warmups;
  f.device = s.device;
  f.dtype = s.dtype;
  f.load_format = s.load_format;
  f.memory_limit = s.memory_limit;
  f.kv_cache_growth = s.kv_cache_growth;
  f.seed = s.seed;
  f.disable_telemetry = s.disable_telemetry;
  f.disable_tqdm = true;
  f.max_num_seqs = std::max(256, batch);
  f.metric_percentiles = "50,95,99";
  f.result_dir = (dir / "cells" / cell_name(batch, len)).string();
  f.overwrite = true;
  return f;
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

Result<int> run_find_oom(const SweepFlags& s, const RunPlan& plan, const std::vector<int>& lens,
                         const fs::path& dir, const std::atomic<bool>& stop) {
  const NativeTargetOptions& n = plan.target.native;
  if (s.device == "cpu" && !n.backend.memory_limit_bytes) {
    return user_error(
        "--find-oom on the CPU needs --memory-limit (e.g. 512MiB): host memory "
        "would otherwise be the limit");
  }
  IB_ASSIGN_OR_RETURN(auto backend, create_backend(n.backend));
  detail::OomSearchOptions o;
  o.base.model = n.model;
  o.base.weights = n.weights;
  o.base.engine = n.engine;
  o.base.engine.use_graphs = false;  // each probe rebuilds the engine; graphs would dominate
  o.base.engine.max_num_seqs = s.oom_max_batch;
  o.base.engine.cpu_kv_cache_bytes = n.backend.memory_limit_bytes.value_or(int64_t{1} << 40);
  o.base.steps = s.oom_steps;
  o.base.seed = s.seed;
  o.input_lens = lens;
  o.max_batch = s.oom_max_batch;
  o.context_batch = s.find_oom_batch;
  // Every finished probe goes to oom_probes.jsonl at once (flushed), so an interrupted or failed
  // search keeps what it measured; oom.json/.md/.svg follow when the search is complete.
  const fs::path probes_path = dir / "oom_probes.jsonl";
  std::ofstream probes_file(probes_path, std::ios::trunc);
  if (!probes_file) {
    return runtime_error("cannot write " + probes_path.string() + "; check the --result-dir");
  }
  int64_t probes_done = 0;
  o.on_probe = [&](const json& line) -> Status {
    probes_file << line.dump() << "\n";
    probes_file.flush();
    if (!probes_file) return runtime_error("cannot write " + probes_path.string());
    ++probes_done;
    return Ok{};
  };
  auto searched = detail::find_oom(*backend, o, stop);
  if (!searched.ok() && stop.load()) {
    std::fprintf(stderr,
                 "inferbench: find-oom interrupted; the %lld finished probe(s) are in %s (no "
                 "thresholds: the search did not finish)\n",
                 static_cast<long long>(probes_done), probes_path.string().c_str());
    return kExitInterrupted;
  }
  IB_ASSIGN_OR_RETURN(json oom, std::move(searched));
  oom["env"] = environment_fingerprint();
  IB_TRY(write_file_atomic(dir / "oom.json", oom.dump(2) + "\n"));
  const std::string md = detail::oom_markdown(oom);
  IB_TRY(write_file_atomic(dir / "oom.md", md));
  IB_TRY(write_file_atomic(dir / "oom_headroom.svg", detail::oom_headroom_svg(oom)));
  std::cout << md;
  std::fprintf(stderr, "inferbench: oom.json, oom.md, oom_headroom.svg in %s\n",
               dir.string().c_str());
  return kExitOk;
}

}  // namespace

void add_sweep_flags(CLI::App& app, SweepFlags& f) {
  app.add_option("--model", f.model, "preset name, HF repo id, or a directory")
      ->capture_default_str();
  app.add_option("--batch-sizes", f.batch_sizes, "grid rows")->capture_default_str();
  app.add_option("--input-lens", f.input_lens, "grid columns (prompt tokens)")
      ->capture_default_str();
  app.add_option("--output-len,--num-steps", f.output_len, "output tokens per request")
      ->capture_default_str();
  app.add_option("--input-len-dist", f.input_len_dist,
                 "per cell, {L} = the cell's input length, e.g. normal:mean={L},std=16,min=1,"
                 "max=4096");
  app.add_option("--num-prompts", f.num_prompts, "requests per cell run (default: one batch)");
  app.add_option("--runs", f.runs, "repetitions per cell (median reported)")->capture_default_str();
  app.add_option("--num-warmups", f.num_warmups, "warm-up requests per cell (default: a batch)");
  app.add_option("--device", f.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", f.dtype, "auto, fp32, bf16, fp16")->capture_default_str();
  app.add_option("--load-format", f.load_format, "auto, dummy or safetensors")
      ->capture_default_str();
  app.add_option("--memory-limit", f.memory_limit, "tracked-allocator cap, e.g. 24GiB");
  app.add_option("--kv-cache-growth", f.kv_cache_growth, "preallocated or on-demand")
      ->capture_default_str();
  app.add_option("--max-duration", f.max_duration, "refuse a grid estimated longer (90s, 30m, 2h)")
      ->capture_default_str();
  app.add_option("--result-dir", f.result_dir, "the sweep's directory")->required();
  app.add_flag("--resume", f.resume, "skip the cells grid.json already holds as done");
  app.add_flag("--overwrite", f.overwrite, "start over in a directory that holds a grid");
  app.add_option("--seed", f.seed, "seed of prompts and dummy weights")->capture_default_str();
  app.add_flag("--disable-telemetry", f.disable_telemetry, "no memory sampling per cell");
  app.add_flag("--find-oom", f.find_oom,
               "instead of the grid: the largest batch per input length (and, with "
               "--find-oom-batch, the longest context) completing --oom-steps steps");
  app.add_option("--oom-steps", f.oom_steps, "steps a probe must complete")->capture_default_str();
  app.add_option("--find-oom-batch", f.find_oom_batch, "also search the longest context here");
  app.add_option("--oom-max-batch", f.oom_max_batch, "largest batch searched")
      ->capture_default_str();
}

Result<int> execute_sweep(const SweepFlags& s, const PluginRegistry& registry,
                          const std::atomic<bool>& stop) {
  IB_ASSIGN_OR_RETURN(const std::vector<int> batches, parse_list(s.batch_sizes, "--batch-sizes"));
  IB_ASSIGN_OR_RETURN(const std::vector<int> lens, parse_list(s.input_lens, "--input-lens"));
  IB_ASSIGN_OR_RETURN(const double max_s, parse_duration_s(s.max_duration));
  if (s.oom_steps <= 0 || s.oom_max_batch <= 0 || s.find_oom_batch < 0) {
    return user_error("--oom-steps and --oom-max-batch must be positive, --find-oom-batch >= 0");
  }
  const fs::path dir = s.result_dir;
  std::vector<Cell> cells;
  for (int b : batches) {
    for (int l : lens) {
      IB_ASSIGN_OR_RETURN(RunPlan plan, resolve_run(cell_flags(s, b, l, dir), registry));
      cells.push_back(Cell{b, l, std::move(plan)});
    }
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return user_error(fmt::format("--result-dir {}: {}", dir.string(), ec.message()));
  if (s.find_oom) return run_find_oom(s, cells.front().plan, lens, dir, stop);

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
  std::vector<Cell*> todo;
  for (Cell& c : cells) {
    const json old = done_before(c.batch, c.input_len);
    grid["cells"].push_back(old.is_null() ? detail::pending_cell(c.batch, c.input_len) : old);
    if (old.is_null()) todo.push_back(&c);
  }
  json est = nullptr;
  if (!todo.empty()) {
    std::vector<Cell> pending;
    for (Cell* c : todo) pending.push_back(*c);
    IB_ASSIGN_OR_RETURN(est, detail::estimate_grid_s(pending, lens, s.output_len));
    const double e = est["estimated_s"].get<double>();
    std::fprintf(stderr, "inferbench: sweep of %zu cells estimated at %s (%s)\n", todo.size(),
                 human_s(e).c_str(), est["method"].get<std::string>().c_str());
    if (e > max_s) {
      return user_error(fmt::format(
          "the grid of {} cells is estimated at {} ({}), beyond --max-duration {}; raise "
          "--max-duration or use fewer/smaller cells",
          todo.size(), human_s(e), est["method"].get<std::string>(), s.max_duration));
    }
  }
  grid["config"] = json{{"batch_sizes", batches},
                        {"input_lens", lens},
                        {"output_len", s.output_len},
                        {"input_len_dist", s.input_len_dist},
                        {"num_prompts", s.num_prompts},
                        {"runs", s.runs},
                        {"device", s.device},
                        {"dtype", s.dtype},
                        {"memory_limit", s.memory_limit},
                        {"kv_cache_growth", s.kv_cache_growth},
                        {"max_duration", s.max_duration},
                        {"seed", s.seed}};
  grid["env"] = environment_fingerprint();
  grid["estimate"] = est;
  IB_TRY(write_outputs(dir, grid, batches, lens));

  const int64_t t0 = now_ns();
  int done = 0;
  bool interrupted = false;
  for (Cell* c : todo) {
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
    auto code = execute_run(c->plan, registry, stop, false);
    std::cout.rdbuf(old_buf);
    json cell;
    const fs::path result = c->plan.result_dir / kResultJson;
    if (code.ok() && fs::exists(result)) {
      IB_ASSIGN_OR_RETURN(const std::string text, read_file(result));
      cell = detail::cell_from_result(c->batch, c->input_len, json::parse(text, nullptr, false));
      if (*code == kExitInterrupted) cell["status"] = "interrupted";
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
    if (code.ok() && *code == kExitInterrupted) {
      interrupted = true;
      break;
    }
  }
  grid["elapsed_s"] = static_cast<double>(now_ns() - t0) * 1e-9;
  IB_TRY(write_outputs(dir, grid, batches, lens));
  if (auto plotly = load_plotly_js(); plotly.ok()) {
    const auto maps = detail::grid_heatmaps(grid["cells"], batches, lens);
    IB_TRY(write_file_atomic(
        dir / "report.html",
        grid_report_html("Sweep: " + s.model,
                         fmt::format("{} on {}, output {} tokens", s.model, s.device, s.output_len),
                         maps, grid["cells"], *plotly)));
  } else {
    std::fprintf(stderr, "inferbench: report.html not written: %s\n",
                 plotly.error().message.c_str());
  }
  std::cout << detail::grid_markdown(grid["cells"]);
  std::fprintf(stderr, "inferbench: grid.csv, grid.json, grid_*.svg, report.html in %s\n",
               dir.string().c_str());
  return interrupted ? kExitInterrupted : kExitOk;
}

}  // namespace ib
