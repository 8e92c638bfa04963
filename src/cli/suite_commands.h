// `inferbench suite`, `inferbench compare` and `inferbench run --from`: subcommands over many
// results (declared apart from commands.h so they merge cleanly with other subcommands).
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/run_options.h"
#include "core/plugin_registry.h"

namespace ib {

// `inferbench suite FILE.yaml [--model-list a,b] [--result-dir DIR] [--resume]`: validates every
// entry first (one line per bad entry, exit 2), runs each into DIR/<entry>/ (a failing entry is
// recorded and the suite goes on), then writes the leaderboard (leaderboard.md/.csv/.html, the
// Markdown on stdout) and the cross-model memory heatmap (heatmap.svg/.html). A DIR holding a
// suite state file resumes: entries finished with the same flags are skipped. Exit 0 when every
// entry succeeded, 1 when one failed, 2 on bad input, 130 when interrupted.
struct SuiteFlags {
  std::string file;
  std::string model_list;
  std::string result_dir;  // default: results/<suite name>
  bool resume = false;
  bool dry_run = false;      // validate and print each entry's `run` arguments; run nothing
  bool report_only = false;  // rebuild the leaderboard from DIR's state and results; run nothing
  std::vector<std::string> overrides;  // --override num_prompts=16: after every entry's flags
  bool retry_failed = false;           // entries recorded as failed run again
  // --executor slurm: one job array per resource request (cli/detail/suite_support.h).
  std::string executor = "local";
  std::string slurm_partition;
  std::string slurm_gres;        // "" (gpu:1 for cuda entries), "none" or a --gres value
  int slurm_time_limit_min = 0;  // 0: from the entries' earlier runs, else 60
  std::vector<std::string> slurm_args;
  // --executor k8s: Indexed Jobs for kubectl apply.
  std::string k8s_image;
  std::string k8s_namespace = "default";
  std::string k8s_pvc;
  std::string k8s_gpu_resource = "nvidia.com/gpu";
  int array_task = -1;   // >= 0: run this entry alone (a Slurm array task)
  bool collect = false;  // merge the tasks' states, write the leaderboard
};
void add_suite_flags(CLI::App& app, SuiteFlags& flags);
Result<int> execute_suite(const SuiteFlags& flags, const PluginRegistry& registry,
                          const std::atomic<bool>& stop);

// `inferbench compare A B`: see compare/compare.h. Exit 1 on a significant regression.
struct CompareFlags {
  std::string a;
  std::string b;
  std::string threshold = "5%";
  bool force = false;
  bool allow_switch_diff = false;
  std::string json_out;
  std::string markdown_out;
};
void add_compare_flags(CLI::App& app, CompareFlags& flags);
Result<int> execute_compare(const CompareFlags& flags);

// `inferbench run --from DIR/result.json [overrides]`: the flags recorded in result.json's
// `config`, then the overrides (the arguments after `run`, without --from). A malformed file is a
// user error; a different inferbench version or git SHA is a warning on stderr.
Result<RunFlags> flags_from_result(const std::string& path,
                                   const std::vector<std::string>& overrides,
                                   nlohmann::json* recorded_config = nullptr);
// "key: recorded vs now" for each config key the rerun resolved differently, except the result
// directory and keys whose flag is among the overrides. Empty when the rerun is exact.
std::vector<std::string> config_drift(const nlohmann::json& recorded, const nlohmann::json& now,
                                      const std::vector<std::string>& overrides);
// The `run` arguments reproducing a recorded config (result_dir and overwrite left out).
Result<std::vector<std::string>> args_from_config(const nlohmann::json& config);
// Parses `run` arguments (later values win) into flags, as `inferbench run` would.
Result<RunFlags> parse_run_args(const std::vector<std::string>& args);

}  // namespace ib
