// Front door of orchestrate/: executes a run, a sweep grid, an OOM search and a suite from typed,
// validated configs (cli/ turns flags into them). Every call runs on the caller's thread; `stop`
// (Ctrl-C) is polled between requests, cells, probes and entries. Progress is drawn by the
// caller through RunProgress; result directories are written here.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/plugin_registry.h"
#include "core/result.h"
#include "model/config.h"
#include "runner/progress.h"
#include "runner/runner.h"
#include "suite/suite.h"
#include "targets/targets.h"
#include "workload/workload.h"

namespace ib {

// How an execution ended; the caller maps it to an exit code.
enum class Outcome {
  kOk,
  kFailed,       // a run measured nothing (every request failed), or a suite entry failed
  kInterrupted,  // stop was raised; what completed is on disk, marked "interrupted"
};

// A benchmark as the user asked for it, every value typed and checked (cli/run_options.h builds
// it from `inferbench run` flags).
struct RunConfig {
  std::string backend = "native";  // target plugin name
  std::string device = "cpu";      // as in target.native.backend.device, for messages and labels
  ModelConfig model;
  TargetOptions target;  // engine, backend, weights, sampling; openai: the HTTP client
  // The CPU KV budget; nullopt: sized to the workload (capped by the engine's default).
  std::optional<int64_t> kv_cache_bytes;
  int max_model_len = 0;                           // the context every request must fit
  std::string workload_plugin = "random-dataset";  // the dataset's plugin in the registry
  WorkloadOptions workload;                        // vocab_size is the model's
  // The model's preparation of requests with images (cli/model_vision.h), run on the built
  // workload before its context check; null: requests with images are refused.
  std::function<Status(std::vector<RequestSpec>&)> prepare_images;
  RunnerOptions runner;  // num_warmups < 0: one batch
  MetricsOptions metrics;
  std::vector<std::string> percentile_metrics;
  std::filesystem::path result_dir;
  bool overwrite = false;  // reuse a non-empty result_dir
  int memory_sample_interval_ms = 100;
  bool telemetry = true;  // sampler, step markers, allocation trace
  // With target.native.calibration set (--calibration): how many of the dataset's first prompts
  // calibrate; plan_run draws them (workload/workload.h, dataset_prompts) into it.
  int calibration_prompts = 0;
  // LoRA benchmarking: the adapters requests ask for (the --lora-modules names; empty: none,
  // every request the base model) and how each request picks one (--lora-assignment).
  std::vector<std::string> lora_names;
  std::string lora_assignment = "random";
  // --num-clients N > 1 (HTTP targets): the run is split over N client processes, each running
  // client_argv (this binary, "run" and the resolved flags) plus its slice, the shared clock
  // origin and its own result directory; their request records are merged into this result.
  int num_clients = 1;
  std::vector<std::string> client_argv;
  // How the clients start: processes of this host, or (slurm) the tasks of one
  // `srun --ntasks N` step, with these srun options.
  struct SlurmClients {
    std::string partition;           // --partition ("" leaves Slurm's default)
    std::vector<std::string> extra;  // further srun options, as given (e.g. --nodes=2)
  };
  std::optional<SlurmClients> slurm_clients;
  // In one of those clients: its share of the workload (every client_count-th request from
  // client_index), of the concurrency, the rate and the warm-ups; and the benchmark's time zero
  // on the one clock (shared by the processes of one host).
  int client_index = 0;
  int client_count = 1;
  std::optional<int64_t> clock_origin_ns;
  std::optional<int64_t> clock_origin_unix_ns;  // Slurm tasks: the same origin on the wall clock
  // Where the clients meet before each measured run (the parent's clients/ directory): each
  // run starts in every client together (orchestrate/detail/client_sync.h).
  std::optional<std::filesystem::path> client_sync_dir;
  // The resolved flags echoed into result.json; plan_run sets the keys it derives (batch_size,
  // num_prompts, lengths, warm-ups, load description, KV bytes, max_num_seqs, result_dir).
  nlohmann::json config;
};

// A config with its workload built: the requests, the warm-up count, the KV budget.
struct RunPlan : RunConfig {
  std::vector<RequestSpec> requests;
  std::string load_description;  // "static batches of 8", ...
};

// Builds the workload (its dataset plugin from the registry) and checks every request fits.
Result<RunPlan> plan_run(const RunConfig& config, const PluginRegistry& registry);

// Live progress of a run, drawn by the caller; either may be empty.
struct RunProgress {
  std::function<void(const Progress&)> update;
  std::function<void()> clear;
};

// `inferbench run`: loads the target, runs, writes the result directory (created only once the
// target is loaded) and prints the table on stdout.
Result<Outcome> execute_run(const RunPlan& plan, const PluginRegistry& registry,
                            const std::atomic<bool>& stop, const RunProgress& progress = {});

// `inferbench run --num-clients N`: N client processes (plan.client_argv) against one endpoint,
// started here or as the tasks of one srun step (plan.slurm_clients), each measuring its own
// latencies and overhead (their result directories and logs under result_dir/clients/); their
// per-request records are merged into one result in result_dir. A client that fails is an error
// naming its log; a step Slurm refuses, an error with srun's message.
Result<Outcome> execute_distributed_run(const RunPlan& plan, const PluginRegistry& registry,
                                        const std::atomic<bool>& stop);

// `inferbench sweep`: batch sizes x input lengths, one result directory per cell under
// dir/cells/, grid.csv / grid.json / heatmaps / report.html in dir.
struct SweepConfig {
  RunConfig base;     // every cell's settings but the ones below
  std::string model;  // the --model text, for grid.json and the report title
  std::vector<int> batch_sizes;
  std::vector<int> input_lens;
  int output_len = 32;
  std::string input_len_dist;  // per cell, "{L}" replaced by its input length; empty: fixed
  int num_prompts = 0;         // per cell; 0: one batch
  std::filesystem::path dir;
  bool resume = false;     // keep the cells grid.json holds as done
  bool overwrite = false;  // start over in a directory holding a grid
  double max_duration_s = 1800;
  std::string max_duration;  // as given, for messages
  nlohmann::json config;     // the sweep's flags echoed into grid.json
};

// One grid cell: the base config with the cell's batch, input length, prompts and directory.
struct SweepCell {
  int batch = 0;
  int input_len = 0;
  RunPlan plan;
};

// Every cell planned (all checked before anything runs), in row-major order.
Result<std::vector<SweepCell>> plan_sweep(const SweepConfig& sweep, const PluginRegistry& registry);
Result<Outcome> execute_sweep(const SweepConfig& sweep, const std::vector<SweepCell>& cells,
                              const PluginRegistry& registry, const std::atomic<bool>& stop);

// `inferbench sweep --find-oom`: the largest batch per input length (and the longest context at
// context_batch) completing `steps` steps, KV growing on demand and preallocated. The engine
// settings are the first cell's; oom_probes.jsonl / oom.json / oom.md / oom_headroom.svg in dir.
struct OomSearchConfig {
  int steps = 8;
  int max_batch = 1024;
  int context_batch = 0;  // > 0: also the longest context at this batch
};
Result<Outcome> execute_find_oom(const SweepConfig& sweep, const SweepCell& first,
                                 const OomSearchConfig& search, const std::atomic<bool>& stop);

// `inferbench suite`: its entries, each planned as `inferbench run` would plan it.
struct SuiteEntryPlan {
  SuiteEntry entry;
  std::optional<RunPlan> plan;  // nullopt: cannot run here (allow_failure entries only)
  std::string invalid;          // why not
};
struct SuitePlan {
  std::string name;
  std::filesystem::path dir;  // DIR/<entry>/ per entry, the state file, the leaderboard
  std::vector<SuiteEntryPlan> entries;
  // `inferbench eval` for an entry with eval_args, after its run succeeded, writing its JSON to
  // the path given (DIR/<entry>/eval.json); cli/ provides it (eval lives there). A failure marks
  // the entry failed.
  std::function<Status(const SuiteEntry&, const std::filesystem::path&)> run_eval;
  // --retry-failed: entries recorded as failed (with the same flags) run again.
  bool retry_failed = false;
};

// The state to continue from: dir's state file, a fresh one, or a user error (--resume without
// a state, a non-empty directory without one).
Result<SuiteState> open_suite_state(const std::filesystem::path& dir, const std::string& name,
                                    bool resume);
// Runs the entries not done in `state` (a failing entry is recorded and the suite goes on),
// saving the state after each, then writes the leaderboard. kFailed: an entry without
// allow_failure failed.
Result<Outcome> execute_suite(const SuitePlan& suite, SuiteState state,
                              const PluginRegistry& registry, const std::atomic<bool>& stop,
                              const RunProgress& progress = {});
// Runs entry i of the suite (its run, then its eval) into DIR/<entry>/ and returns its state
// ("ok", "failed" with the error, or "interrupted"); an entry that cannot run here is "failed"
// with "not run: ...". Used by execute_suite and by a Slurm array task (one entry).
EntryState run_suite_entry(const SuitePlan& suite, size_t i, const PluginRegistry& registry,
                           const std::atomic<bool>& stop, const RunProgress& progress = {});
// leaderboard.md/.csv/.html and heatmap.svg/.html in dir from the entries' results; the Markdown
// on stdout.
Status write_suite_report(const std::filesystem::path& dir, const std::string& name,
                          const std::vector<SuiteEntry>& entries, const SuiteState& state);

// The cross-run memory heatmap of result directories into `out` (.svg or .html, checked by the
// caller). Directories without memory samples are named on stderr and the rest drawn.
Status write_memory_heatmap(const std::vector<std::string>& dirs, const std::string& out,
                            int frames);

// A mixture-of-experts run's layer x expert load heatmap (expert_load.svg) drawn again from its
// result directory's result.json (engine.routing) into `out` (.svg, checked by the caller).
Status write_expert_load(const std::string& dir, const std::string& out);

}  // namespace ib
