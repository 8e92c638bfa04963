// The engine behind the server, on its own thread: the thread creates the backend and the
// engine, steps while work is queued, and destroys both (CUDA contexts require one thread).
#include <future>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>

#include <fmt/format.h>

#include "core/clock.h"
#include "server/detail/request_inbox.h"
#include "server/generator.h"

namespace ib {
namespace {

class EngineGenerator final : public Generator {
 public:
  explicit EngineGenerator(EngineGeneratorOptions options) : options_(std::move(options)) {}
  ~EngineGenerator() override { stop(); }

  Status start(EventSink sink) override {
    IB_ASSERT(!thread_.joinable(), "EngineGenerator::start called twice");
    sink_ = std::move(sink);
    std::promise<Status> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, &ready] { run(ready); });
    Status st = started.get();
    if (!st.ok()) thread_.join();
    return st;
  }

  void submit(GenerationRequest request) override { inbox_.submit(std::move(request)); }
  void abort(uint64_t id) override { inbox_.abort(id); }

  GeneratorStats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

  void stop() override {
    inbox_.stop();
    if (thread_.joinable()) thread_.join();
  }

  const ModelConfig& model() const override { return options_.model; }
  int max_model_len() const override { return max_model_len_; }
  std::string describe() const override { return description_; }

 private:
  void run(std::promise<Status>& ready) {
    auto backend = create_backend(options_.backend);
    if (!backend.ok()) return ready.set_value(backend.error());
    std::unique_ptr<Backend> b = std::move(backend).value();
    auto engine = create_engine(options_.model, options_.weights, options_.engine, *b);
    if (!engine.ok()) return ready.set_value(engine.error());
    engine_ = std::move(engine).value();
    const EngineStats s = engine_->stats();
    max_model_len_ = s.max_model_len;
    description_ =
        fmt::format("{} on {} ({}, {} KV blocks of {} tokens, context {})", options_.model.name,
                    b->device_info().name, engine_->weights_description(), s.kv_blocks_total,
                    engine_->config().block_size, s.max_model_len);
    snapshot();
    ready.set_value(Ok{});
    loop();
    engine_.reset();  // before the backend that owns its memory
  }

  void loop() {
    std::vector<GenerationRequest> incoming;
    std::vector<uint64_t> aborts;
    for (;;) {
      const bool busy = engine_->has_unfinished() && !broken_;  // then only collect, no wait
      if (!inbox_.take(incoming, aborts, busy ? std::optional<int64_t>(0) : std::nullopt)) return;
      std::vector<GenEvent> events;
      for (auto& r : incoming) {
        const uint64_t id = r.id;
        Status st =
            broken_ ? Status(runtime_error(broken_message_)) : engine_->add_request(std::move(r));
        if (st.ok()) {
          live_.insert(id);
        } else {
          events.push_back(GenEvent{id, -1, now_ns(), FinishReason::kAborted, st.error().message});
        }
      }
      incoming.clear();
      for (uint64_t id : aborts) {
        engine_->abort_request(id);
        live_.erase(id);
      }
      aborts.clear();
      if (engine_->has_unfinished() && !broken_) step(events);
      snapshot();
      if (!events.empty()) sink_(std::move(events));
    }
  }

  void step(std::vector<GenEvent>& events) {
    auto out = engine_->step();
    if (!out.ok()) {
      broken_ = true;  // a device failure: nothing more runs on this engine
      broken_message_ = out.error().message;
      for (uint64_t id : live_) {
        events.push_back(GenEvent{id, -1, now_ns(), FinishReason::kAborted, broken_message_});
      }
      live_.clear();
      return;
    }
    for (const TokenEvent& ev : out->events) {
      if (ev.finish != FinishReason::kNone) live_.erase(ev.request_id);
      events.push_back(GenEvent{ev.request_id, ev.token, ev.time_ns, ev.finish, {}});
    }
  }

  void snapshot() {
    const EngineStats s = engine_->stats();
    std::lock_guard lock(mu_);
    stats_.running = s.num_running;
    stats_.waiting = s.num_waiting;
    stats_.kv_blocks_used = s.kv_blocks_used;
    stats_.kv_blocks_total = s.kv_blocks_total;
    stats_.device_allocated_bytes = s.memory.allocated_bytes;
    stats_.device_peak_allocated_bytes = s.memory.peak_allocated_bytes;
    stats_.weights_bytes = s.weight_bytes;
    stats_.kv_pool_bytes = s.kv_block_bytes * s.kv_blocks_total;
  }

  EngineGeneratorOptions options_;
  EventSink sink_;
  std::thread thread_;
  int max_model_len_ = 0;
  std::string description_;

  detail::RequestInbox inbox_;
  mutable std::mutex mu_;
  GeneratorStats stats_;  // guarded by mu_

  // Generator thread only.
  std::unique_ptr<Engine> engine_;
  std::unordered_set<uint64_t> live_;  // added and not finished
  bool broken_ = false;
  std::string broken_message_;
};

}  // namespace

std::unique_ptr<Generator> make_engine_generator(EngineGeneratorOptions options) {
  return std::make_unique<EngineGenerator>(std::move(options));
}

}  // namespace ib
