// Front door of server/: the embedded engine (or the null model) behind an OpenAI-compatible
// HTTP API (Boost.Beast): POST /v1/completions and /v1/chat/completions (streaming SSE and not),
// GET /v1/models, /health and /metrics (Prometheus text).
//
// Threading: one I/O thread runs every connection (the caller of run()); the generator has its
// own thread and hands token events to the I/O thread. start() and run() are called once, in
// that order, from one thread; request_drain() and request_stop() from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/result.h"
#include "model/chat_template.h"
#include "model/tokenizer.h"
#include "server/generator.h"       // IWYU pragma: export
#include "server/image_prompter.h"  // IWYU pragma: export
#include "server/protocol.h"        // IWYU pragma: export
#include "trace/trace.h"

namespace ib {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8000;               // 0: any free port (see Server::port())
  std::string api_key;                // non-empty: /v1/* needs "Authorization: Bearer <key>"
  std::string served_model_name;      // empty: the model's name
  size_t max_body_bytes = 16u << 20;  // larger bodies get 413
  int idle_timeout_s = 60;            // a connection that sends no request for this long closes
  uint64_t seed = 0;                  // sampling seed of requests that give none: seed + id
  bool handle_signals = false;        // SIGINT/SIGTERM: first drains, second aborts and exits
  // Device energy in joules since some fixed point, where the device reports it.
  std::function<std::optional<double>()> energy_joules;
  // /metrics also under vLLM's names and labels (vllm:num_requests_running, ...), so that
  // dashboards built for vLLM read inferbench (serve --metrics-names vllm).
  bool vllm_metric_names = false;
  // The model's chat template for /v1/chat/completions and /tokenize {messages}; null:
  // render_chat's fixed format (models without a template).
  std::shared_ptr<const ChatFormat> chat_format;
  // The model's images (a vision-language model's image_url parts); null: image parts are a 400
  // ("the served model has no vision tower").
  std::shared_ptr<const ImagePrompter> images;
  // --otlp-endpoint: each generation request's spans (a child of the caller's traceparent), and
  // the trace counters in /metrics. An empty endpoint: no tracing.
  TraceOptions trace;
};

class Server {
 public:
  virtual ~Server() = default;
  // Starts the generator (loads the model) and binds. Errors: the engine's, or a port in use.
  virtual Status start() = 0;
  // The bound port (after start()).
  virtual uint16_t port() const = 0;
  // Serves until a drain completes or a stop; returns on the calling thread.
  virtual void run() = 0;
  // Stops accepting, answers new generation requests with 503, lets in-flight requests finish,
  // then run() returns.
  virtual void request_drain() = 0;
  // Aborts everything in flight and returns from run() at once.
  virtual void request_stop() = 0;
  // "tiny-15m on cpu (...)": for the startup line.
  virtual std::string describe() const = 0;
};

// tokenizer: how text prompts are encoded and tokens decoded (byte fallback for dummy presets).
std::unique_ptr<Server> make_server(ServerOptions options, std::unique_ptr<Generator> generator,
                                    std::unique_ptr<Tokenizer> tokenizer);

// Raises this process's open-file limit to its hard limit (each stream holds a socket); returns
// the new soft limit.
int64_t raise_open_file_limit();

}  // namespace ib
