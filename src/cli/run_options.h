// `inferbench run`: its flags (named as `vllm bench serve` and the seed name them) and their
// resolution into a validated RunConfig (orchestrate/ runs it). Everything a user can get wrong is
// checked here, before any file is created or any model is loaded.
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/calibration_flags.h"
#include "cli/engine_flags.h"
#include "cli/trace_flags.h"
#include "core/plugin_registry.h"
#include "orchestrate/orchestrate.h"

namespace ib {

// Raw flag values, as typed.
struct RunFlags : EngineFlags, CalibrationFlags, TraceFlags {
  // Benchmark (vLLM names where they exist).
  std::string model = "tiny-15m";
  std::string backend = "native";
  uint64_t seed = 0;
  int num_prompts = 200;
  std::string request_rate = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: not given
  std::string percentile_metrics = "ttft,tpot,itl";
  std::string metric_percentiles = "99";
  std::string goodput;
  std::string result_dir;
  bool overwrite = false;
  int num_warmups = -1;  // -1: one batch (the default)
  std::string dataset_name = "random";
  std::string dataset_path;
  // --dataset-name random-mm (vLLM's flags): images per request, their spread, cap and sizes.
  int random_mm_base_items_per_request = 1;
  double random_mm_num_mm_items_range_ratio = 0;
  std::string random_mm_limit_mm_per_prompt = R"({"image": 255, "video": 0})";
  std::string random_mm_bucket_config = "{(256, 256, 1): 0.5, (720, 1280, 1): 0.5}";
  bool disable_tqdm = false;
  // The seed's protocol.
  int batch_size = 8;
  int input_len = 32;
  int output_len = 128;
  std::string input_len_dist;
  std::string output_len_dist;
  std::string dtype = "auto";
  std::string device = "cpu";
  int runs = 3;
  std::string load_mode = "auto";
  int memory_sample_interval_ms = 100;
  bool disable_telemetry = false;   // no sampler, step markers or allocation trace (A/B overhead)
  std::string cv_threshold = "5%";  // runs varying more (coefficient of variation) are flagged
  // Engine (the shared ones in EngineFlags).
  std::string batching = "continuous";
  bool no_cuda_graphs = false;  // also --enforce-eager (vLLM's name)
  int max_graph_batch = 256;
  int max_graph_context = 8192;
  std::string memory_limit;                      // tracked-allocator cap, e.g. 24GiB; empty: none
  std::string kv_cache_growth = "preallocated";  // or on-demand
  double temperature = 0.0;
  double top_p = 1.0;
  int top_k = 0;
  bool no_ignore_eos = false;
  // HTTP targets (--backend openai / openai-chat).
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint;  // default by backend
  std::string api_key_env;
  std::string dialect = "auto";
  std::string extra_body;
  double request_timeout_s = 3600;
  bool insecure = false;
  // LoRA benchmarking: how each request picks one of the --lora-modules adapters.
  std::string lora_assignment = "random";
  // Distributed load generation (--backend openai): the run split over this many client
  // processes. Set by the parent for each client: its slice "I/N" and the shared clock origin.
  int num_clients = 1;
  std::string client_launcher = "local";  // or slurm (srun --ntasks N)
  std::string slurm_partition;
  std::vector<std::string> slurm_args;
  std::string client_slice;
  int64_t clock_origin_ns = 0;
  int64_t clock_origin_unix_ns = 0;  // Slurm tasks, on hosts whose monotonic clocks differ
  std::string client_sync_dir;       // where the clients meet before each run
};

void add_run_flags(CLI::App& app, RunFlags& flags);

// Validates the flags into a typed config. User errors name the flag and the fix.
Result<RunConfig> resolve_run_config(const RunFlags& flags, const PluginRegistry& registry);
// resolve_run_config, then plan_run (the workload built, every request checked to fit).
Result<RunPlan> resolve_run(const RunFlags& flags, const PluginRegistry& registry);

// --device (cpu, cuda, cuda:N, and whether this build has CUDA) and --dtype ("auto" by device).
Status check_device(const std::string& device);
Result<DType> resolve_dtype(const std::string& dtype, const std::string& device);

// --load-format: auto, dummy or safetensors.
Result<LoadFormat> parse_load_format(const std::string& text);

// "2GiB", "512MiB", "1.5G", "1073741824" -> bytes.
Result<int64_t> parse_bytes(const std::string& text, const std::string& flag);

}  // namespace ib
