// `inferbench serve`: the embedded engine (or the null model) behind an OpenAI-compatible HTTP
// API. Flags follow `vllm serve` where it has them.
#pragma once

#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/engine_flags.h"
#include "cli/model_vision.h"
#include "cli/trace_flags.h"
#include "core/result.h"

namespace ib {

struct ServeFlags : EngineFlags, TraceFlags, ImageFlags {
  std::string model = "tiny-15m";  // preset, directory, or "null"
  std::string served_model_name;
  std::string device = "cpu";
  std::string dtype = "auto";
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string metrics_names = "inferbench";  // "vllm": /metrics also under vLLM's names
  double token_rate = 0;                     // null model: tokens/s per request (0: unpaced)
  uint64_t seed = 0;
  std::string max_body_size = "16MiB";
  std::string chat_template;  // a Jinja file overriding the model's chat template (vLLM's flag)
  std::string tokenizer;      // --model null: a tokenizer directory or .gguf file (vLLM's flag)
};

void add_serve_flags(CLI::App& app, ServeFlags& flags);

// Loads the model, binds, serves until SIGINT/SIGTERM (the first drains, a second aborts).
// Returns the exit code; user errors for bad flags, a model that does not fit, a busy port.
Result<int> execute_serve(const ServeFlags& flags);

}  // namespace ib
