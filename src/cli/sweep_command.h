// `inferbench sweep`: the orthogonal stress matrix (batch sizes x input lengths), one normal
// result directory per cell, grid.csv / grid.json / heatmaps / report.html over them; and
// `--find-oom`: the largest batch (per input length) and the longest context (for a batch) that
// complete N steps, with the KV pool growing on demand and preallocated.
#pragma once

#include <atomic>
#include <string>

#include <CLI/CLI.hpp>

#include "core/plugin_registry.h"
#include "core/result.h"

namespace ib {

struct SweepFlags {
  std::string model = "tiny-15m";
  std::string batch_sizes = "16,32,64,128";
  std::string input_lens = "64,256,512,1024";
  int output_len = 32;
  std::string input_len_dist;  // per cell, "{L}" replaced by the cell's input length
  int num_prompts = 0;         // 0: one batch per cell (= the batch size)
  int runs = 1;
  int num_warmups = -1;
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string load_format = "auto";
  std::string memory_limit;
  std::string kv_cache_growth = "preallocated";
  std::string kv_cache_dtype = "auto";
  std::string max_duration = "30m";
  std::string result_dir;
  bool resume = false;
  bool overwrite = false;
  uint64_t seed = 0;
  bool disable_telemetry = false;
  // --find-oom
  bool find_oom = false;
  int oom_steps = 8;
  int find_oom_batch = 0;  // > 0: also search the longest context at this batch
  int oom_max_batch = 1024;
};

void add_sweep_flags(CLI::App& app, SweepFlags& flags);
Result<int> execute_sweep(const SweepFlags& flags, const PluginRegistry& registry,
                          const std::atomic<bool>& stop);

}  // namespace ib
