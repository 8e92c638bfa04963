// `inferbench serve`: flags, model and tokenizer resolution, and the server's lifetime.
#include "cli/serve_command.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "backend/backend_factory.h"
#include "cli/commands.h"
#include "cli/run_options.h"
#include "core/clock.h"
#include "engine/engine.h"
#include "model/chat_template.h"
#include "model/presets.h"
#include "model/tensor_parallel.h"
#include "model/tokenizer.h"
#include "server/server.h"
#include "telemetry/collector.h"

namespace ib {
namespace {

// vision: set to the model's vision side (none for a text-only model).
Result<std::unique_ptr<Generator>> make_generator(const ServeFlags& f, ModelVision& vision) {
  if (f.model == "null") {
    if (!f.limit_mm_per_prompt.empty() || !f.allowed_local_media_path.empty()) {
      return user_error(
          "--limit-mm-per-prompt and --allowed-local-media-path need a "
          "vision-language model; --model null takes text only");
    }
    return make_null_generator(f.token_rate);
  }
  IB_ASSIGN_OR_RETURN(ModelConfig model, resolve_model(f.model));
  IB_TRY(model.check_supported());
  IB_TRY(check_block_sparse(model, f.block_sparse_attention));
  IB_TRY(check_device(f.device));
  IB_TRY(check_tensor_parallel(model, f.tensor_parallel_size));
  IB_TRY(check_rank_devices(f.device, f.tensor_parallel_size));
  IB_ASSIGN_OR_RETURN(const DType dtype, resolve_dtype(f.dtype, f.device));
  if (f.num_threads < 0) return user_error("--num-threads must be >= 0 (0: all cores)");
  EngineGeneratorOptions o;
  o.model = model;
  IB_ASSIGN_OR_RETURN(o.weights.format, parse_load_format(f.load_format));
  o.weights.path = model_weights_path(f.model);
  o.weights.seed = f.seed;
  IB_ASSIGN_OR_RETURN(vision, model_vision(model, o.weights.path, f));
  o.vision_encoder = vision.encoder;
  IB_ASSIGN_OR_RETURN(o.engine,
                      engine_config_from(f, batch_defaults_for(f.device, /*api_server=*/true)));
  IB_TRY(o.engine.validate());  // before any weight loads
  o.backend.device = f.device;
  o.backend.dtype = dtype;
  o.backend.num_threads = f.num_threads;
  return make_engine_generator(std::move(o));
}

// Device energy for /metrics: the "nvml" collector, sampled when /metrics is scraped (on the
// server's I/O thread only, so never concurrently); joules summed over GPUs since the first
// sample. Nothing (no series) where NVML or its energy counter is missing.
std::function<std::optional<double>()> nvml_energy() {
  CollectorContext context;
  context.notice = [](const std::string&) {};  // no GPU is not worth a line here
  std::shared_ptr<Collector> nvml = make_nvml_collector(context);
  if (!nvml->start(now_ns()).ok()) return {};
  std::vector<size_t> energy;
  const auto columns = nvml->columns();
  for (size_t i = 0; i < columns.size(); ++i) {
    if (columns[i].ends_with("energy_j")) energy.push_back(i);
  }
  if (energy.empty()) return {};
  return [nvml, energy]() -> std::optional<double> {
    nvml->sample(now_ns());
    std::vector<double> row;
    nvml->append_values(row);
    double joules = 0;
    bool any = false;
    for (size_t i : energy) {
      if (i < row.size() && !std::isnan(row[i])) {
        joules += row[i];
        any = true;
      }
    }
    return any ? std::optional<double>(joules) : std::nullopt;
  };
}

}  // namespace

void add_serve_flags(CLI::App& app, ServeFlags& f) {
  app.add_option("--model", f.model,
                 "preset name, HF repo id, a directory with config.json (and tokenizer.json), a "
                 ".gguf file, or null (streams tokens without computing)")
      ->capture_default_str();
  app.add_option("--served-model-name", f.served_model_name,
                 "the name clients send as \"model\" (default: the model's)");
  app.add_option("--device", f.device, "cpu, cuda or cuda:N")->capture_default_str();
  app.add_option("--dtype", f.dtype, "auto (fp32 on cpu, bf16 on cuda), fp32, bf16, fp16")
      ->capture_default_str();
  app.add_option("--host", f.host, "address to bind (0.0.0.0 exposes the server)")
      ->capture_default_str();
  app.add_option("--port", f.port, "TCP port (0: any free port)")->capture_default_str();
  app.add_option("--api-key", f.api_key, "require \"Authorization: Bearer KEY\" on /v1/*");
  app.add_option("--metrics-names", f.metrics_names,
                 "inferbench, or vllm: /metrics also under vLLM's names and labels "
                 "(vllm:num_requests_running, vllm:time_to_first_token_seconds, ...) for "
                 "dashboards built for vLLM")
      ->check(CLI::IsMember({"inferbench", "vllm"}))
      ->capture_default_str();
  app.add_option("--token-rate", f.token_rate,
                 "null model: tokens per second per request (0: as fast as possible)")
      ->capture_default_str();
  app.add_option("--seed", f.seed, "dummy weights; sampling seed of requests that give none")
      ->capture_default_str();
  add_engine_flags(app, f);
  add_trace_flags(app, f);
  app.add_option("--limit-mm-per-prompt", f.limit_mm_per_prompt,
                 "vision-language models: the images one prompt may hold, as JSON "
                 "'{\"image\": N}' or image=N (default 1; more are a 400 naming the part)");
  app.add_option("--allowed-local-media-path", f.allowed_local_media_path,
                 "vision-language models: image_url parts may be file:// URLs under this "
                 "directory (default: data: URLs only)");
  app.add_option("--max-body-size", f.max_body_size, "larger request bodies get 413")
      ->capture_default_str();
  app.add_option("--tokenizer", f.tokenizer,
                 "with --model null: the tokenizer (and chat template) of a model directory with "
                 "tokenizer.json, or of a .gguf file, so the null model serves real token counts "
                 "(default: the byte fallback)");
  app.add_option("--chat-template", f.chat_template,
                 "a Jinja chat template file for /v1/chat/completions, overriding the model's "
                 "(tokenizer_config.json's chat_template or chat_template.jinja); without either, "
                 "chat messages use the fixed \"<|role|>\\ncontent\\n\" format");
}

Result<int> execute_serve(const ServeFlags& f) {
  if (f.port < 0 || f.port > 65535) {
    return user_error(fmt::format("--port {}: must be in 0..65535", f.port));
  }
  if (f.model != "null" && f.token_rate != 0) {
    return user_error("--token-rate applies to --model null only");
  }
  if (!(f.token_rate >= 0)) return user_error("--token-rate must be >= 0");
  IB_ASSIGN_OR_RETURN(const int64_t body_bytes, parse_bytes(f.max_body_size, "--max-body-size"));
  IB_ASSIGN_OR_RETURN(TraceOptions trace, trace_options_from(f, "inferbench serve"));
  if (!f.tokenizer.empty() && f.model != "null") {
    return user_error("--tokenizer applies to --model null only; a model serves its own tokenizer");
  }
  if (!f.tokenizer.empty() && !has_own_tokenizer(f.tokenizer)) {
    return user_error(fmt::format(
        "--tokenizer {}: not a directory with tokenizer.json nor a GGUF file with a tokenizer",
        f.tokenizer));
  }
  const std::string source = f.model == "null" ? f.tokenizer : f.model;
  IB_ASSIGN_OR_RETURN(auto tokenizer, load_tokenizer(source));
  IB_ASSIGN_OR_RETURN(auto chat_format, ChatFormat::load(source, f.chat_template));
  ModelVision vision;
  IB_ASSIGN_OR_RETURN(auto generator, make_generator(f, vision));
  const int64_t open_files = raise_open_file_limit();

  ServerOptions o;
  o.host = f.host;
  o.port = static_cast<uint16_t>(f.port);
  o.api_key = f.api_key;
  o.served_model_name = f.served_model_name;
  o.vllm_metric_names = f.metrics_names == "vllm";
  o.max_body_bytes = static_cast<size_t>(body_bytes);
  o.seed = f.seed;
  o.handle_signals = true;
  o.trace = std::move(trace);
  o.images = std::move(vision.prompter);
  if (f.device != "cpu" || std::getenv("INFERBENCH_NVML_LIBRARY") != nullptr) {  // a fake NVML
    o.energy_joules = nvml_energy();
  }
  const std::string chat_origin = chat_format
                                      ? "chat template from " + chat_format->origin()
                                      : std::string("no chat template: the fixed <|role|> format");
  if (chat_format) o.chat_format = std::make_shared<const ChatFormat>(std::move(*chat_format));
  const std::string tokenizer_name = tokenizer->name();
  auto server = make_server(std::move(o), std::move(generator), std::move(tokenizer));
  std::fprintf(stderr, "inferbench: loading %s on %s\n", f.model.c_str(), f.device.c_str());
  IB_TRY(server->start());
  std::fprintf(stderr,
               "inferbench: serving %s (tokenizer %s, %s, open-file limit %lld) on "
               "http://%s:%u; SIGINT/SIGTERM drains\n",
               server->describe().c_str(), tokenizer_name.c_str(), chat_origin.c_str(),
               static_cast<long long>(open_files), f.host.c_str(), server->port());
  std::fflush(stderr);
  server->run();
  std::fprintf(stderr, "inferbench: server stopped\n");
  return kExitOk;
}

}  // namespace ib
