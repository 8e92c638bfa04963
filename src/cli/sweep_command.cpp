// `inferbench sweep`: its flags, and their resolution into a SweepConfig (the base run config
// checked as `inferbench run` checks it); orchestrate/ plans and runs the cells.
#include "cli/sweep_command.h"

#include <cstdlib>
#include <filesystem>
#include <sstream>

#include <fmt/format.h>

#include "cli/commands.h"
#include "cli/run_options.h"
#include "orchestrate/orchestrate.h"

namespace ib {
namespace {

using nlohmann::json;

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

// The flags every cell shares, as `inferbench run` flags (the cell's batch, input length,
// prompts, sequence cap and directory are set per cell by orchestrate/).
RunFlags base_flags(const SweepFlags& s) {
  RunFlags f;
  f.model = s.model;
  f.output_len = s.output_len;
  f.runs = s.runs;
  f.num_warmups = s.num_warmups;
  f.device = s.device;
  f.dtype = s.dtype;
  f.load_format = s.load_format;
  f.memory_limit = s.memory_limit;
  f.kv_cache_growth = s.kv_cache_growth;
  f.kv_cache_dtype = s.kv_cache_dtype;
  f.seed = s.seed;
  f.disable_telemetry = s.disable_telemetry;
  f.disable_tqdm = true;
  f.metric_percentiles = "50,95,99";
  f.result_dir = (std::filesystem::path(s.result_dir) / "cells").string();
  f.overwrite = true;
  return f;
}

}  // namespace

void add_sweep_flags(CLI::App& app, SweepFlags& f) {
  app.add_option("--model", f.model, "preset name, HF repo id, a directory or a .gguf file")
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
  app.add_option("--load-format", f.load_format, kLoadFormatHelp)->capture_default_str();
  app.add_option("--memory-limit", f.memory_limit, "tracked-allocator cap, e.g. 24GiB");
  app.add_option("--kv-cache-growth", f.kv_cache_growth, "preallocated or on-demand")
      ->capture_default_str();
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype, kKvCacheDtypeHelp)->capture_default_str();
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
  SweepConfig sweep;
  IB_ASSIGN_OR_RETURN(sweep.batch_sizes, parse_list(s.batch_sizes, "--batch-sizes"));
  IB_ASSIGN_OR_RETURN(sweep.input_lens, parse_list(s.input_lens, "--input-lens"));
  IB_ASSIGN_OR_RETURN(sweep.max_duration_s, parse_duration_s(s.max_duration));
  if (s.oom_steps <= 0 || s.oom_max_batch <= 0 || s.find_oom_batch < 0) {
    return user_error("--oom-steps and --oom-max-batch must be positive, --find-oom-batch >= 0");
  }
  IB_ASSIGN_OR_RETURN(sweep.base, resolve_run_config(base_flags(s), registry));
  sweep.model = s.model;
  sweep.output_len = s.output_len;
  sweep.input_len_dist = s.input_len_dist;
  sweep.num_prompts = s.num_prompts;
  sweep.dir = s.result_dir;
  sweep.resume = s.resume;
  sweep.overwrite = s.overwrite;
  sweep.max_duration = s.max_duration;
  sweep.config = json{{"batch_sizes", sweep.batch_sizes},
                      {"input_lens", sweep.input_lens},
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
  IB_ASSIGN_OR_RETURN(const std::vector<SweepCell> cells, plan_sweep(sweep, registry));
  Result<Outcome> outcome =
      s.find_oom
          ? execute_find_oom(sweep, cells.front(),
                             OomSearchConfig{s.oom_steps, s.oom_max_batch, s.find_oom_batch}, stop)
          : execute_sweep(sweep, cells, registry, stop);
  IB_ASSIGN_OR_RETURN(const Outcome o, std::move(outcome));
  return exit_code(o);
}

}  // namespace ib
