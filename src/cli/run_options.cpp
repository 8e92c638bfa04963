// Resolution of `inferbench run` flags into a validated RunPlan.
#include "cli/run_options.h"
#include "backend/backend_factory.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "cli/model_vision.h"
#include "cli/plugins.h"
#include "cli/suite_commands.h"
#include "compare/compare.h"
#include "core/subprocess.h"
#include "engine/engine.h"
#include "engine/moe_support.h"
#include "model/gguf.h"
#include "model/presets.h"
#include "model/tensor_parallel.h"
#include "report/result_dir.h"
#include "targets/chat_images.h"
#include "telemetry/sampler.h"
#include "workload/lora_assignment.h"

namespace ib {
namespace {

Status positive(int64_t v, const char* flag) {
  if (v <= 0) return user_error(fmt::format("{} must be positive (got {})", flag, v));
  return Ok{};
}

Result<double> parse_rate(const std::string& text) {
  if (text == "inf" || text == "Inf" || text == "INF") {
    return std::numeric_limits<double>::infinity();
  }
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || ptr != text.data() + text.size() || !(v > 0) || !std::isfinite(v)) {
    return user_error(fmt::format(
        "--request-rate {}: must be a positive number of requests per second or inf", text));
  }
  return v;
}

Result<LengthDist> length_flag(const std::string& dist, int fixed, const char* dist_flag) {
  if (dist.empty()) return LengthDist::fixed(fixed);
  return parse_length_dist(dist, dist_flag);
}

Result<LoadMode> resolve_load_mode(const RunFlags& f, bool finite_rate) {
  if (f.load_mode == "auto") {
    if (finite_rate) return LoadMode::kOpen;
    return f.max_concurrency > 0 ? LoadMode::kClosed : LoadMode::kStatic;
  }
  if (f.load_mode == "open") return LoadMode::kOpen;
  if (finite_rate) {
    return user_error(
        fmt::format("--request-rate applies to the open loop, not --load-mode {}; drop one of them",
                    f.load_mode));
  }
  if (f.load_mode == "closed") return LoadMode::kClosed;
  if (f.load_mode == "static") {
    if (f.max_concurrency > 0) {
      return user_error(
          "--max-concurrency applies to closed and open loops, not --load-mode static; drop "
          "one of them");
    }
    return LoadMode::kStatic;
  }
  return user_error(fmt::format("--load-mode {}: use auto, static, closed or open", f.load_mode));
}

bool is_http_backend(const std::string& backend);

// --block-sparse-attention in result.json: {block_size, local_blocks, vert_stride}, or null for
// dense attention (the flag is validated before the config is written).
nlohmann::json block_sparse_json(const std::string& text) {
  const Result<BlockSparse> b = parse_block_sparse(text);
  if (!b.ok() || !b->enabled()) return nullptr;
  return {{"block_size", b->block_size},
          {"local_blocks", b->local_blocks},
          {"vert_stride", b->vert_stride}};
}

// The run's engine settings: the shared engine flags plus run's own (batching, graphs, KV growth),
// validated once (EngineConfig::validate names each flag).
Result<EngineConfig> run_engine_config(const RunFlags& f) {
  IB_ASSIGN_OR_RETURN(EngineConfig c,
                      engine_config_from(f, batch_defaults_for(f.device, /*api_server=*/false)));
  if (f.batching != "continuous" && f.batching != "static") {
    return user_error(fmt::format("--batching {}: use continuous or static", f.batching));
  }
  c.batching = f.batching == "static" ? BatchingMode::kStatic : BatchingMode::kContinuous;
  c.static_batch_size = f.batch_size;
  c.use_graphs = !f.no_cuda_graphs;
  c.max_graph_batch = f.max_graph_batch;
  c.max_graph_context = f.max_graph_context;
  if (f.kv_cache_growth != "preallocated" && f.kv_cache_growth != "on-demand") {
    return user_error(
        fmt::format("--kv-cache-growth {}: use preallocated or on-demand", f.kv_cache_growth));
  }
  c.kv_growth = f.kv_cache_growth == "on-demand" ? KvGrowth::kOnDemand : KvGrowth::kPreallocated;
  if (is_http_backend(f.backend) && !f.block_sparse_attention.empty()) {
    return user_error(fmt::format(
        "--block-sparse-attention sets the embedded engine's attention, and --backend {} sends "
        "the requests to a server; start that server with the flag (inferbench serve "
        "--block-sparse-attention ...) and drop it here",
        f.backend));
  }
  if (is_http_backend(f.backend)) {  // the server holds the adapters; --lora-modules names them
    c.enable_lora = c.merge_lora = false;
    c.lora_modules.clear();
  }
  IB_TRY(c.validate());
  return c;
}

// The run's other flags that need no model.
Status check_run_flags(const RunFlags& f) {
  IB_TRY(validate_sample_interval_ms(f.memory_sample_interval_ms));
  if (f.num_threads < 0) return user_error("--num-threads must be >= 0 (0: all hardware threads)");
  if (!(f.temperature >= 0) || !std::isfinite(f.temperature)) {
    return user_error(fmt::format("--temperature {} must be >= 0 (0: greedy)", f.temperature));
  }
  if (!(f.top_p > 0 && f.top_p <= 1)) {
    return user_error(fmt::format("--top-p {} must be in (0, 1]", f.top_p));
  }
  if (f.top_k < 0) return user_error(fmt::format("--top-k {} must be >= 0 (0: off)", f.top_k));
  if (auto format = parse_load_format(f.load_format); !format.ok()) return format.error();
  return Ok{};
}

bool is_http_backend(const std::string& backend) {
  return backend == "openai" || backend == "openai-chat";
}

// A model known only by the name the server serves it under: random token ids stay below 32000
// (inside every common vocabulary) and the context is the server's business.
ModelConfig served_model_stub(const std::string& name) {
  ModelConfig m;
  m.name = name;
  std::replace(m.name.begin(), m.name.end(), '/', '_');
  m.family = "remote";
  m.vocab_size = 32000;
  m.max_position_embeddings = 1 << 20;
  return m;
}

Status resolve_http_target(const RunFlags& f, const NativeTargetOptions& n,
                           OpenAITargetOptions& o) {
  IB_ASSIGN_OR_RETURN(const BaseUrl url, parse_base_url(f.base_url));
  IB_TRY(resolve_dialect(f.dialect, url));
  o.base_url = f.base_url;
  o.endpoint = f.endpoint;
  o.chat = f.backend == "openai-chat";
  o.model = f.model;
  o.dialect = f.dialect;
  o.extra_body = f.extra_body;
  o.request_timeout_s = f.request_timeout_s;
  o.verify_tls = !f.insecure;
  o.sampling = n.sampling;
  o.ignore_eos = n.ignore_eos;
  if (!f.api_key_env.empty()) {
    const char* key = std::getenv(f.api_key_env.c_str());
    if (key == nullptr || *key == '\0') {
      return user_error(fmt::format("--api-key-env {}: the variable is not set", f.api_key_env));
    }
    o.api_key = key;
  }
  OpenAITargetOptions probe = o;
  probe.api_key.clear();
  auto target = make_openai_target(probe);
  if (!target.ok()) return target.error();
  return Ok{};
}

// --num-clients (the parent) and --client-slice / --clock-origin-ns (each client).
Status resolve_clients(const RunFlags& f, bool http, RunConfig& p) {
  if (f.num_clients < 1)
    return user_error(fmt::format("--num-clients {}: must be >= 1", f.num_clients));
  p.num_clients = f.num_clients;
  if (!f.client_slice.empty()) {
    int index = -1;
    int count = 0;
    char slash = 0;
    std::istringstream in(f.client_slice);
    in >> index >> slash >> count;
    if (!in || !in.eof() || slash != '/' || count < 1 || index < 0 || index >= count) {
      return user_error(fmt::format("--client-slice {}: not I/N with 0 <= I < N", f.client_slice));
    }
    p.client_index = index;
    p.client_count = count;
    if (f.clock_origin_ns > 0) p.clock_origin_ns = f.clock_origin_ns;
    if (f.clock_origin_unix_ns > 0) p.clock_origin_unix_ns = f.clock_origin_unix_ns;
    if (!f.client_sync_dir.empty()) p.client_sync_dir = f.client_sync_dir;
  }
  const bool slurm = f.client_launcher == "slurm";
  if (!slurm && (!f.slurm_partition.empty() || !f.slurm_args.empty())) {
    return user_error(
        "--slurm-partition and --slurm-arg set up the clients' srun step: add "
        "--client-launcher slurm (and --num-clients N)");
  }
  if (slurm) {
    if (f.num_clients < 2) {
      return user_error(fmt::format(
          "--client-launcher slurm: give --num-clients N >= 2 (got {}); to run one client on a "
          "Slurm node, start inferbench run inside srun yourself",
          f.num_clients));
    }
    for (const std::string& a : f.slurm_args) {
      if (a.rfind("-", 0) != 0) {
        return user_error(fmt::format(
            "--slurm-arg {}: not an srun option; write it with its dashes and value in one "
            "word, e.g. --slurm-arg=--nodes=2",
            a));
      }
    }
    if (!on_path("srun")) {
      return user_error(
          "--client-launcher slurm: srun is not on PATH; install Slurm's client commands "
          "(Debian/Ubuntu: apt install slurm-client) on a machine that reaches the cluster's "
          "controller, or use --client-launcher local");
    }
    p.slurm_clients = RunConfig::SlurmClients{f.slurm_partition, f.slurm_args};
  }
  if (f.num_clients == 1) return Ok{};
  const std::string why = fmt::format("--num-clients {}", f.num_clients);
  if (!http) {
    return user_error(why +
                      ": distributed load generation drives an HTTP server; use --backend "
                      "openai or openai-chat (the native engine lives in one process)");
  }
  if (!f.client_slice.empty()) return user_error(why + ": a client of such a run is one process");
  if (f.max_concurrency == 0 && f.request_rate == "inf") {
    return user_error(why +
                      ": give --max-concurrency C (C >= N, split between the clients) or "
                      "--request-rate R (R / N each); static batches cannot be split "
                      "across processes without synchronizing them");
  }
  if (f.load_mode == "static") return user_error(why + ": --load-mode static cannot be split");
  if (f.max_concurrency > 0 && f.max_concurrency < f.num_clients) {
    return user_error(
        fmt::format("{}: --max-concurrency {} gives a client no request in flight; "
                    "use at most {} clients",
                    why, f.max_concurrency, f.max_concurrency));
  }
  if (f.num_prompts < f.num_clients) {
    return user_error(
        fmt::format("{}: --num-prompts {} leaves a client without a request", why, f.num_prompts));
  }
  if (!f.lora_modules.empty()) {
    return user_error(why + ": not with --lora-modules yet");
  }
  return Ok{};
}

// --random-mm-*: given only with --dataset-name random-mm (their defaults are vLLM's).
Status random_mm_flags(const RunFlags& f, RandomMmOptions& mm) {
  const RunFlags defaults;
  const bool any =
      f.random_mm_base_items_per_request != defaults.random_mm_base_items_per_request ||
      f.random_mm_num_mm_items_range_ratio != defaults.random_mm_num_mm_items_range_ratio ||
      f.random_mm_limit_mm_per_prompt != defaults.random_mm_limit_mm_per_prompt ||
      f.random_mm_bucket_config != defaults.random_mm_bucket_config;
  if (f.dataset_name != "random-mm") {
    if (any) return user_error("--random-mm-* flags apply to --dataset-name random-mm only");
    return Ok{};
  }
  mm.base_items_per_request = f.random_mm_base_items_per_request;
  mm.num_mm_items_range_ratio = f.random_mm_num_mm_items_range_ratio;
  IB_ASSIGN_OR_RETURN(mm.limit_images,
                      parse_limit_mm_per_prompt(f.random_mm_limit_mm_per_prompt,
                                                "--random-mm-limit-mm-per-prompt"));
  IB_ASSIGN_OR_RETURN(mm.buckets, parse_mm_bucket_config(f.random_mm_bucket_config));
  return Ok{};
}

}  // namespace

Status check_device(const std::string& device) {
  if (device == "cpu") return Ok{};
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    const std::string index = device.size() > 5 ? device.substr(5) : "0";
    if (index.empty() || index.find_first_not_of("0123456789") != std::string::npos) {
      return user_error(fmt::format("--device {}: write cuda or cuda:N", device));
    }
    if (!cuda_backend_compiled()) {
      return user_error(fmt::format(
          "--device {}: this build has no CUDA backend; rebuild where nvcc is found or use "
          "--device cpu",
          device));
    }
    return Ok{};
  }
  return user_error(fmt::format("--device {}: unknown device; use cpu, cuda or cuda:N", device));
}

Result<DType> resolve_dtype(const std::string& dtype, const std::string& device) {
  const bool cpu = device == "cpu";
  if (dtype == "auto") return cpu ? DType::kF32 : DType::kBF16;
  const auto parsed = parse_float_dtype(dtype);
  if (!parsed) {
    return user_error(fmt::format("--dtype {}: unknown; use auto, fp32, bf16 or fp16", dtype));
  }
  if (cpu && *parsed != DType::kF32) {
    return user_error(fmt::format(
        "--dtype {}: the CPU backend computes in fp32 only; use --dtype fp32 or --device cuda",
        dtype));
  }
  return *parsed;
}

Result<LoadFormat> parse_load_format(const std::string& text) {
  if (text == "auto") return LoadFormat::kAuto;
  if (text == "dummy") return LoadFormat::kDummy;
  if (text == "safetensors") return LoadFormat::kSafetensors;
  if (text == "gguf") return LoadFormat::kGguf;
  return user_error(fmt::format("--load-format {}: use auto, dummy, safetensors or gguf", text));
}

Result<int64_t> parse_bytes(const std::string& text, const std::string& flag) {
  double v = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  const std::string unit(ptr, text.data() + text.size());
  double scale = 0;
  if (unit.empty() || unit == "B") scale = 1;
  if (unit == "KiB" || unit == "K" || unit == "k") scale = 1024.0;
  if (unit == "MiB" || unit == "M") scale = 1024.0 * 1024;
  if (unit == "GiB" || unit == "G") scale = 1024.0 * 1024 * 1024;
  if (ec != std::errc() || scale == 0 || !(v > 0) || v * scale > 9e18) {
    return user_error(
        fmt::format("{} {}: write a positive size like 2GiB, 512MiB or 1073741824", flag, text));
  }
  return static_cast<int64_t>(v * scale);
}

Result<RunConfig> resolve_run_config(const RunFlags& f, const PluginRegistry& registry) {
  RunConfig p;
  p.backend = f.backend;
  p.device = f.device;
  const PluginInfo* target = registry.find(f.backend);
  if (target == nullptr || target->kind != PluginKind::kTarget) {
    return user_error(fmt::format("--backend {}: no such target; available: {}", f.backend,
                                  fmt::join(registry.names_of(PluginKind::kTarget), ", ")));
  }
  const bool http = is_http_backend(f.backend);
  if (auto model = resolve_model(f.model); model.ok()) {
    p.model = *model;
  } else if (http) {
    p.model = served_model_stub(f.model);
  } else {
    return model.error();
  }
  if (!http) IB_TRY(p.model.check_supported());
  if (!http) {
    IB_TRY(check_gguf_quantization(f.quantization, f.model, is_gguf_file(f.model),
                                   f.load_format == "dummy"));
  }
  // Before anything starts: the one line of a user error.
  if (!http) IB_TRY(check_block_sparse(p.model, f.block_sparse_attention));
  IB_TRY(check_device(f.device));
  if (!http) {
    IB_TRY(check_tensor_parallel(p.model, f.tensor_parallel_size));
    IB_TRY(check_rank_devices(f.device, f.tensor_parallel_size));
  }
  IB_ASSIGN_OR_RETURN(const DType dtype, resolve_dtype(f.dtype, f.device));
  IB_TRY(check_run_flags(f));
  IB_ASSIGN_OR_RETURN(TraceOptions trace, trace_options_from(f, "inferbench run"));
  IB_TRY(resolve_clients(f, http, p));
  IB_ASSIGN_OR_RETURN(const EngineConfig engine, run_engine_config(f));
  if (!http) {
    IB_ASSIGN_OR_RETURN(const WeightFormat format, quantization_weight_format(engine.quantization));
    IB_TRY(check_moe_quantization(p.model, format));
  }
  IB_ASSIGN_OR_RETURN(const std::optional<ResolvedCalibration> calibration,
                      resolve_calibration(f, f.quantization));
  if (calibration && http) {
    return user_error(fmt::format(
        "--calibration sets the embedded engine's activation scales; --backend {} runs none "
        "here: drop --calibration",
        f.backend));
  }
  if (f.max_model_len > p.model.max_position_embeddings) {
    return user_error(
        fmt::format("--max-model-len {} exceeds what {} supports ({}); lower it or drop the flag",
                    f.max_model_len, p.model.name, p.model.max_position_embeddings));
  }
  p.max_model_len = f.max_model_len > 0 ? f.max_model_len : p.model.max_position_embeddings;
  // LoRA: the adapters requests ask for, by name (an HTTP server's: name or name=path items).
  if (auto a = parse_lora_assignment(f.lora_assignment); !a.ok()) return a.error();
  p.lora_assignment = f.lora_assignment;
  if (http) {
    for (const std::string& item : f.lora_modules) {
      p.lora_names.push_back(item.substr(0, item.find('=')));
    }
  } else {
    p.lora_names = lora_module_names(f);
  }

  // Workload.
  const std::string workload_name = workload_plugin_name(f.dataset_name);
  const PluginInfo* workload = registry.find(workload_name);
  if (workload == nullptr || workload->kind != PluginKind::kWorkload) {
    std::vector<std::string> names;
    for (const auto& n : registry.names_of(PluginKind::kWorkload)) {
      names.push_back(n.substr(0, n.size() - std::string("-dataset").size()));
    }
    return user_error(fmt::format("--dataset-name {}: no such dataset; available: {}",
                                  f.dataset_name, fmt::join(names, ", ")));
  }
  p.workload_plugin = workload_name;
  WorkloadOptions& w = p.workload;
  w.dataset_name = f.dataset_name;
  w.dataset_path = f.dataset_path;
  w.num_prompts = f.num_prompts;
  w.seed = f.seed;
  w.vocab_size = p.model.vocab_size;
  IB_ASSIGN_OR_RETURN(w.input_len, length_flag(f.input_len_dist, f.input_len, "--input-len-dist"));
  IB_ASSIGN_OR_RETURN(w.output_len,
                      length_flag(f.output_len_dist, f.output_len, "--output-len-dist"));
  IB_TRY(random_mm_flags(f, w.random_mm));

  // Load mode, warm-up, runs.
  IB_ASSIGN_OR_RETURN(const double rate, parse_rate(f.request_rate));
  if (f.max_concurrency < 0) IB_TRY(positive(f.max_concurrency, "--max-concurrency"));
  RunnerOptions& r = p.runner;
  IB_ASSIGN_OR_RETURN(r.mode, resolve_load_mode(f, std::isfinite(rate)));
  r.batch_size = f.batch_size;
  r.max_concurrency = f.max_concurrency;
  r.request_rate = rate;
  r.burstiness = f.burstiness;
  r.seed = f.seed;
  r.runs = f.runs;
  IB_TRY(positive(f.batch_size, "--batch-size"));
  if (f.num_warmups < -1) {
    return user_error(fmt::format("--num-warmups must be >= 0 (got {})", f.num_warmups));
  }
  r.num_warmups = f.num_warmups;

  // Metrics.
  IB_ASSIGN_OR_RETURN(p.metrics.percentiles, parse_metric_percentiles(f.metric_percentiles));
  IB_ASSIGN_OR_RETURN(p.percentile_metrics, parse_percentile_metrics(f.percentile_metrics));
  if (!f.goodput.empty()) {
    IB_ASSIGN_OR_RETURN(p.metrics.goodput, parse_goodput(f.goodput));
  }

  // Target.
  NativeTargetOptions& n = p.target.native;
  n.model = p.model;
  IB_ASSIGN_OR_RETURN(n.weights.format, parse_load_format(f.load_format));
  n.weights.path = model_weights_path(f.model);
  n.weights.seed = f.seed;
  n.engine = engine;
  if (!f.kv_cache_memory.empty()) p.kv_cache_bytes = engine.cpu_kv_cache_bytes;
  if (!f.memory_limit.empty()) {
    IB_ASSIGN_OR_RETURN(n.backend.memory_limit_bytes,
                        parse_bytes(f.memory_limit, "--memory-limit"));
  }
  n.backend.device = f.device;
  n.backend.dtype = dtype;
  n.backend.num_threads = f.num_threads;
  n.sampling.temperature = static_cast<float>(f.temperature);
  n.sampling.top_p = static_cast<float>(f.top_p);
  n.sampling.top_k = f.top_k;
  n.sampling.seed = f.seed;
  n.ignore_eos = !f.no_ignore_eos;
  if (calibration) {  // its prompts are drawn from the dataset by plan_run
    n.calibration = NativeCalibration{calibration->options, {}};
    p.calibration_prompts = calibration->prompts;
  }
  if (!http) {
    IB_ASSIGN_OR_RETURN(const ModelVision vision, model_vision(p.model, n.weights.path, {}));
    n.vision_encoder = vision.encoder;
    p.prepare_images = vision.prepare_requests;
  }
  if (http) IB_TRY(resolve_http_target(f, n, p.target.openai));
  if (http) {
    // Images go as chat image_url parts, built before the run; completions refuse them.
    p.prepare_images = http_image_preparation(p.target.openai);
    p.target.openai.trace = std::move(trace);
  } else {
    n.trace = std::move(trace);
  }

  IB_ASSIGN_OR_RETURN(const double cv_threshold, parse_fraction(f.cv_threshold, "--cv-threshold"));
  IB_ASSIGN_OR_RETURN(p.result_dir, plan_result_dir(f.result_dir, p.model.name, f.overwrite));
  p.overwrite = f.overwrite;
  p.memory_sample_interval_ms = f.memory_sample_interval_ms;
  p.telemetry = !f.disable_telemetry;

  p.config = nlohmann::json{
      {"model", f.model},
      {"backend", f.backend},
      {"seed", f.seed},
      {"request_rate", f.request_rate},
      {"burstiness", f.burstiness},
      {"max_concurrency", f.max_concurrency > 0 ? nlohmann::json(f.max_concurrency) : nullptr},
      {"percentile_metrics", f.percentile_metrics},
      {"metric_percentiles", f.metric_percentiles},
      {"goodput", f.goodput.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.goodput)},
      {"dataset_name", f.dataset_name},
      {"dataset_path",
       f.dataset_path.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.dataset_path)},
      {"disable_tqdm", f.disable_tqdm},
      {"dtype", dtype_name(dtype)},
      {"device", f.device},
      {"runs", f.runs},
      {"memory_sample_interval_ms", f.memory_sample_interval_ms},
      {"telemetry", !f.disable_telemetry},
      {"load_format", f.load_format},
      // vLLM's key; null without quantization, as vLLM records its default.
      {"quantization",
       f.quantization == "none" ? nlohmann::json(nullptr) : nlohmann::json(f.quantization)},
      // vLLM's key and values; null for auto (the model dtype), so that results from before the
      // flag compare as the same workload.
      {"kv_cache_dtype",
       f.kv_cache_dtype == "auto" ? nlohmann::json(nullptr) : nlohmann::json(f.kv_cache_dtype)},
      // The pattern ({block_size, local_blocks, vert_stride}), or null for dense attention.
      {"block_sparse_attention", block_sparse_json(f.block_sparse_attention)},
      // vLLM's engine argument; null for 1, so that results from before the flag compare as the
      // same workload.
      {"tensor_parallel_size", f.tensor_parallel_size == 1
                                   ? nlohmann::json(nullptr)
                                   : nlohmann::json(f.tensor_parallel_size)},
      {"max_num_batched_tokens", n.engine.max_num_batched_tokens},
      {"max_model_len", f.max_model_len > 0 ? nlohmann::json(f.max_model_len) : nullptr},
      {"block_size", f.block_size},
      {"batching", f.batching},
      {"gpu_memory_utilization", f.gpu_memory_utilization},
      {"cuda_graphs", !f.no_cuda_graphs},
      {"max_graph_batch", f.max_graph_batch},
      {"max_graph_context", f.max_graph_context},
      {"memory_limit_bytes", n.backend.memory_limit_bytes
                                 ? nlohmann::json(*n.backend.memory_limit_bytes)
                                 : nlohmann::json(nullptr)},
      {"kv_cache_growth", f.kv_cache_growth},
      {"num_threads", f.num_threads},
      {"temperature", f.temperature},
      {"top_p", f.top_p},
      {"top_k", f.top_k},
      {"ignore_eos", n.ignore_eos},
  };
  p.config["cv_threshold"] = cv_threshold;
  if (f.enable_lora || f.merge_lora || !f.lora_modules.empty()) {
    p.config["lora"] = {{"enable_lora", f.enable_lora},     {"lora_modules", f.lora_modules},
                        {"max_loras", f.max_loras},         {"max_lora_rank", f.max_lora_rank},
                        {"max_cpu_loras", f.max_cpu_loras}, {"merge_lora", f.merge_lora}};
  }
  add_calibration_config(p.config, calibration);  // beside "quantization"
  if (http) {
    p.config["base_url"] = f.base_url;
    p.config["endpoint"] =
        f.endpoint.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.endpoint);
    p.config["api_key_env"] =
        f.api_key_env.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.api_key_env);
    p.config["dialect"] = f.dialect;
    p.config["extra_body"] =
        f.extra_body.empty() ? nlohmann::json(nullptr) : nlohmann::json(f.extra_body);
    p.config["request_timeout_s"] = f.request_timeout_s;
    p.config["insecure"] = f.insecure;
  }
  if (!f.otlp_endpoint.empty()) {
    p.config["otlp_endpoint"] = f.otlp_endpoint;
    p.config["trace_sample_ratio"] = f.trace_sample_ratio;
    if (f.trace_slow_ms >= 0) p.config["trace_slow_ms"] = f.trace_slow_ms;
  }
  return p;
}

Result<RunPlan> resolve_run(const RunFlags& flags, const PluginRegistry& registry) {
  IB_ASSIGN_OR_RETURN(const RunConfig config, resolve_run_config(flags, registry));
  IB_ASSIGN_OR_RETURN(RunPlan plan, plan_run(config, registry));
  if (plan.num_clients > 1) {
    // Each client reruns the resolved flags (as `run --from` would) plus its slice.
    nlohmann::json shared = plan.config;
    for (const char* key : {"num_clients", "client_launcher", "slurm_partition", "slurm_arg"}) {
      shared.erase(key);
    }
    shared["disable_tqdm"] = true;  // their stderr goes to a log
    IB_ASSIGN_OR_RETURN(const std::vector<std::string> args, args_from_config(shared));
    std::error_code ec;
    const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return runtime_error("--num-clients: cannot find this program (/proc/self/exe)");
    plan.client_argv = {self.string(), "run"};
    plan.client_argv.insert(plan.client_argv.end(), args.begin(), args.end());
  }
  return plan;
}

}  // namespace ib
