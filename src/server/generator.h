// Generator: what produces tokens behind the server. The engine generator runs the embedded
// engine on an AsyncEngine (engine/async_engine.h), which owns its thread; the null generator
// streams the prompt back at a fixed token rate without computing, to calibrate clients.
//
// Threading: start() once, then submit()/abort()/stats() from any thread; the sink is called on
// the generator's thread with the events of one step, in order. stop() joins the thread; events
// of requests still live are dropped (the server drains before it stops).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/result.h"
#include "engine/engine.h"
#include "engine/model_weights.h"
#include "model/config.h"

namespace ib {

struct GenEvent {
  uint64_t id = 0;
  int32_t token = -1;  // -1: no token (a failure, or an abort)
  int64_t time_ns = 0;
  FinishReason finish = FinishReason::kNone;  // kNone while the request continues
  std::string error;                          // non-empty: the request failed (not started)
  // The first token's only: when the engine step that produced it began (its prefill; a prompt
  // prefilled in chunks over several steps: the last chunk's). 0 otherwise.
  int64_t step_start_ns = 0;
};

struct GeneratorStats {
  int running = 0;
  int waiting = 0;
  int kv_blocks_used = 0;
  int kv_blocks_total = 0;
  int64_t device_allocated_bytes = 0;
  int64_t device_peak_allocated_bytes = 0;
  int64_t weights_bytes = 0;
  int64_t kv_pool_bytes = 0;
  int64_t preemptions = 0;  // requests the engine's scheduler evicted to free KV blocks, so far
};

class Generator {
 public:
  using EventSink = std::function<void(std::vector<GenEvent>&& events)>;
  virtual ~Generator() = default;
  // Loads the model (engine) and starts the thread. Errors: those of the engine.
  virtual Status start(EventSink sink) = 0;
  // Queues a request; its events (or one failure event) come through the sink.
  virtual void submit(GenerationRequest request) = 0;
  // Ends a request early and frees its KV blocks; no further events are promised for it.
  virtual void abort(uint64_t id) = 0;
  virtual GeneratorStats stats() const = 0;
  virtual void stop() = 0;
  // Valid after start(): the model, the context limit, and a description for logs.
  virtual const ModelConfig& model() const = 0;
  virtual int max_model_len() const = 0;
  virtual std::string describe() const = 0;
  // LoRA adapters (the engine generator with --enable-lora): those loaded at start (name, path,
  // in order); load one now from a PEFT directory (blocks until the engine took it; its rank,
  // shapes and the --max-loras limit are checked); unload one no request uses. User errors say
  // what is wrong and the fix. The default generator has none.
  virtual std::vector<std::pair<std::string, std::string>> initial_loras() const { return {}; }
  virtual Status load_lora(const std::string& name, const std::string& /*path*/) {
    return user_error("LoRA adapter '" + name + "': this server runs no LoRA adapters");
  }
  virtual Status unload_lora(const std::string& name) {
    return user_error("LoRA adapter '" + name + "': this server runs no LoRA adapters");
  }
};

struct EngineGeneratorOptions {
  ModelConfig model;
  WeightOptions weights;
  EngineConfig engine;
  BackendOptions backend;
  // A vision-language model's encoder, made on the engine's backend once the engine is (null: a
  // text-only model).
  std::function<Result<std::unique_ptr<VisionEncoder>>(Backend&)> vision_encoder;
};
std::unique_ptr<Generator> make_engine_generator(EngineGeneratorOptions options);

// The null model: token k (from 0) of a request is its prompt token k mod prompt length, produced
// (k + 1) / tokens_per_s seconds after the request arrived (0: as fast as possible). Vocabulary
// 32000, context 1 Mi.
std::unique_ptr<Generator> make_null_generator(double tokens_per_s);

}  // namespace ib
