// The engine behind the server: an AsyncEngine (engine/async_engine.h) whose requests' tokens and
// ends become GenEvents, handed to the sink once per pass of the engine loop (one step's worth).
#include <utility>

#include <fmt/format.h>

#include "backend/backend_factory.h"
#include "engine/async_engine.h"
#include "server/generator.h"

namespace ib {
namespace {

class EngineGenerator final : public Generator {
 public:
  explicit EngineGenerator(EngineGeneratorOptions options)
      : options_(std::move(options)), engine_(engine_options()) {
    callbacks_.on_token = [this](const TokenEvent& ev) {
      events_.push_back(GenEvent{ev.request_id,
                                 ev.token,
                                 ev.time_ns,
                                 ev.finish,
                                 {},
                                 ev.output_index == 0 ? step_start_ns_ : 0});
    };
    callbacks_.on_finish = [this](uint64_t id, const RequestEnd& end) { on_finish(id, end); };
  }
  ~EngineGenerator() override { stop(); }

  Status start(EventSink sink) override {
    sink_ = std::move(sink);
    return engine_.start();
  }

  void submit(GenerationRequest request) override {
    // Refused only before start() or after stop(), when nobody listens for its events.
    static_cast<void>(engine_.submit(std::move(request), callbacks_));
  }
  void abort(uint64_t id) override { engine_.cancel(id); }

  GeneratorStats stats() const override {
    const EngineStats s = engine_.stats();
    GeneratorStats g;
    g.running = s.num_running;
    g.waiting = s.num_waiting;
    g.kv_blocks_used = s.kv_blocks_used;
    g.kv_blocks_total = s.kv_blocks_total;
    g.device_allocated_bytes = s.memory.allocated_bytes;
    g.device_peak_allocated_bytes = s.memory.peak_allocated_bytes;
    g.weights_bytes = s.weight_bytes;
    g.kv_pool_bytes = s.kv_block_bytes * s.kv_blocks_total;
    g.preemptions = s.preemptions;
    return g;
  }

  void stop() override { engine_.shutdown(); }

  std::vector<std::pair<std::string, std::string>> initial_loras() const override {
    std::vector<std::pair<std::string, std::string>> out;
    if (options_.engine.merge_lora) return out;
    for (const std::string& item : options_.engine.lora_modules) {
      if (auto m = parse_lora_module(item); m.ok()) out.emplace_back(m->name, m->path);
    }
    return out;
  }

  Status load_lora(const std::string& name, const std::string& path) override {
    if (!options_.engine.enable_lora) {
      return user_error("LoRA adapter '" + name + "': LoRA is off; start the server with " +
                        "--enable-lora");
    }
    // Read and checked here (the caller's thread); only the copy into a slot runs on the
    // engine's thread, between two steps.
    IB_ASSIGN_OR_RETURN(const LoraAdapter adapter,
                        load_lora_adapter(path, options_.model, options_.engine.max_lora_rank));
    return engine_.call([&](Engine& engine) { return engine.add_lora(name, adapter); });
  }

  Status unload_lora(const std::string& name) override {
    return engine_.call([&](Engine& engine) { return engine.remove_lora(name); });
  }

  const ModelConfig& model() const override { return options_.model; }
  int max_model_len() const override { return max_model_len_; }
  std::string describe() const override { return description_; }

 private:
  AsyncEngineOptions engine_options() {
    AsyncEngineOptions o;
    o.factory = [this]() -> Result<EngineInstance> {
      EngineInstance instance;
      IB_ASSIGN_OR_RETURN(instance.backend, create_backend(options_.backend));
      IB_ASSIGN_OR_RETURN(instance.engine, create_engine(options_.model, options_.weights,
                                                         options_.engine, *instance.backend));
      if (options_.vision_encoder) {
        IB_ASSIGN_OR_RETURN(auto encoder, options_.vision_encoder(*instance.backend));
        IB_TRY(instance.engine->set_vision_encoder(std::move(encoder)));
      }
      return instance;
    };
    // Before start() returns, on the engine thread.
    o.hooks.on_ready = [this](Engine& engine) {
      const EngineStats s = engine.stats();
      max_model_len_ = s.max_model_len;
      description_ =
          fmt::format("{} on {} ({}, {} KV blocks of {} tokens, context {})", options_.model.name,
                      engine.backend().device_info().name, engine.weights_description(),
                      s.kv_blocks_total, engine.config().block_size, s.max_model_len);
    };
    // Before the step's token events: their first tokens' prefill began at this step's start.
    o.hooks.on_step = [this](Engine&, const StepStats& step) { step_start_ns_ = step.start_ns; };
    o.hooks.after_pass = [this](Engine&) {
      if (events_.empty()) return;
      sink_(std::move(events_));
      events_.clear();
    };
    return o;
  }

  // Engine thread. A finished request's last token already carried its finish reason; after
  // stop() nothing is handed on (the server drains before it stops).
  void on_finish(uint64_t id, const RequestEnd& end) {
    switch (end.kind) {
      case RequestEndKind::kFinished:
      case RequestEndKind::kShutdown:
        return;
      case RequestEndKind::kCancelled:
        events_.push_back(GenEvent{id, -1, end.time_ns, FinishReason::kAborted, {}, 0});
        return;
      case RequestEndKind::kRejected:
      case RequestEndKind::kFailed:
      case RequestEndKind::kUnavailable:
        events_.push_back(GenEvent{id, -1, end.time_ns, FinishReason::kAborted, end.error, 0});
        return;
    }
  }

  EngineGeneratorOptions options_;
  EventSink sink_;
  RequestCallbacks callbacks_;    // the same for every request
  int max_model_len_ = 0;         // written before start() returns
  std::string description_;       // written before start() returns
  std::vector<GenEvent> events_;  // engine thread: this pass's events, for the sink
  int64_t step_start_ns_ = 0;     // engine thread: the last step's start
  AsyncEngine engine_;            // last: its thread uses the members above
};

}  // namespace

std::unique_ptr<Generator> make_engine_generator(EngineGeneratorOptions options) {
  return std::make_unique<EngineGenerator>(std::move(options));
}

}  // namespace ib
