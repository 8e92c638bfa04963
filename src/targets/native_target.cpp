#include "targets/native_target.h"

#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "targets/detail/profile_json.h"

namespace ib {
namespace {

using nlohmann::json;

json describe(const Engine& engine, Backend& backend, const NativeTargetOptions& o) {
  const ModelConfig& m = engine.model_config();
  const EngineConfig& e = engine.config();
  const EngineStats s = engine.stats();
  const DeviceInfo d = backend.device_info();
  return json{
      {"target", "native"},
      {"model",
       {{"name", m.name},
        {"family", m.family},
        {"hf_architecture", m.hf_architecture},
        {"hf_repo_id", m.hf_repo_id},
        {"parameters", m.parameter_count()},
        {"vocab_size", m.vocab_size},
        {"hidden_size", m.hidden_size},
        {"intermediate_size", m.intermediate_size},
        {"num_layers", m.num_layers},
        {"num_heads", m.num_heads},
        {"num_kv_heads", m.num_kv_heads},
        {"head_dim", m.head_dim},
        {"max_position_embeddings", m.max_position_embeddings}}},
      {"device",
       {{"name", d.name},
        {"kind", d.kind},
        {"index", d.index},
        {"total_bytes", d.total_bytes},
        {"copy_ceiling_bytes_per_s", backend.copy_ceiling_bytes_per_s()},
        {"reference_copy_bytes_per_s", kReferenceCopyBytesPerS}}},
      // What the backend's kernel switches selected; `inferbench run` lifts it to the top level.
      {"kernel_switches", kernel_switches_json(backend.kernel_switches())},
      {"dtype", dtype_name(backend.activation_dtype())},
      {"weights", engine.weights_description()},
      {"engine",
       {{"block_size", e.block_size},
        {"num_kv_blocks", s.kv_blocks_total},
        {"kv_block_bytes", s.kv_block_bytes},
        {"kv_pool_bytes", s.kv_block_bytes * s.kv_blocks_total},
        {"max_num_seqs", e.max_num_seqs},
        {"max_num_batched_tokens", e.max_num_batched_tokens},
        {"max_model_len", s.max_model_len},
        {"batching", e.batching == BatchingMode::kStatic ? "static" : "continuous"},
        {"static_batch_size", e.static_batch_size},
        {"gpu_memory_utilization", e.gpu_memory_utilization},
        {"cpu_kv_cache_bytes", e.cpu_kv_cache_bytes},
        {"num_threads", o.backend.num_threads},
        {"cuda_graphs", e.use_graphs && backend.supports_graphs()},
        {"max_graph_batch", e.max_graph_batch},
        {"max_graph_context", e.max_graph_context},
        {"memory_limit_bytes",
         o.backend.memory_limit_bytes ? json(*o.backend.memory_limit_bytes) : json(nullptr)},
        {"kv_growth", kv_growth_name(e.kv_growth)},
        {"kv_blocks_capacity", s.kv_blocks_capacity},
        {"kv_growths", s.kv_growths},
        {"kv_growths_staged", s.kv_growths_staged},
        {"kv_growth_s", s.kv_growth_s}}},
      {"oom",
       {{"oom", s.oom},
        {"steps_before_oom", s.oom ? json(s.oom_step) : json(nullptr)},
        {"message", s.oom_message},
        {"preemptions", s.preemptions},
        {"first_preemption_step",
         s.first_preemption_step >= 0 ? json(s.first_preemption_step) : json(nullptr)},
        {"steps", s.steps},
        {"peak_allocated_bytes", s.memory.peak_allocated_bytes},
        {"refused_allocations", s.memory.num_refused}}},
      {"performance", profile_json(engine.profile())},
      {"sampling",
       {{"temperature", o.sampling.temperature},
        {"top_k", o.sampling.top_k},
        {"top_p", o.sampling.top_p},
        {"seed", o.sampling.seed},
        {"ignore_eos", o.ignore_eos}}},
  };
}

TargetMemory memory_of(const EngineStats& s) {
  TargetMemory m;
  m.weights_bytes = s.weight_bytes;
  m.kv_pool_bytes = s.kv_block_bytes * s.kv_blocks_total;
  m.kv_used_bytes = s.kv_block_bytes * s.kv_blocks_used;
  m.kv_peak_used_bytes = s.kv_block_bytes * s.kv_blocks_peak;
  m.activations_bytes = s.memory.bytes_by_tag[static_cast<size_t>(MemoryTag::kActivations)] +
                        s.memory.bytes_by_tag[static_cast<size_t>(MemoryTag::kWorkspace)];
  m.graph_bytes = s.memory.bytes_by_tag[static_cast<size_t>(MemoryTag::kGraph)];
  m.allocated_bytes = s.memory.allocated_bytes;
  m.peak_allocated_bytes = s.memory.peak_allocated_bytes;
  return m;
}

class NativeTarget : public Target {
 public:
  explicit NativeTarget(NativeTargetOptions options) : options_(std::move(options)) {}
  ~NativeTarget() override { teardown(); }

  std::string name() const override { return "native"; }

  Status setup(TargetCallbacks callbacks) override {
    IB_ASSERT(!thread_.joinable(), "NativeTarget::setup called twice");
    cb_ = std::move(callbacks);
    std::promise<Status> ready;
    auto started = ready.get_future();
    thread_ = std::thread([this, &ready] { engine_thread(ready); });
    Status st = started.get();
    if (!st.ok()) thread_.join();
    return st;
  }

  Status submit(const RequestSpec& r) override { return submit_batch({r}); }

  // All requests of a batch enter the queue under one lock: the engine thread sees them together.
  Status submit_batch(const std::vector<RequestSpec>& requests) override {
    std::vector<GenerationRequest> batch;
    for (const RequestSpec& r : requests) {
      if (r.prompt_tokens.empty()) {
        return user_error("the native target needs token ids; the workload gave none");
      }
      GenerationRequest g;
      g.id = r.id;
      g.prompt_tokens = r.prompt_tokens;
      g.max_tokens = r.output_len;
      g.sampling = options_.sampling;
      g.sampling.seed = options_.sampling.seed + r.id;
      g.ignore_eos = options_.ignore_eos;
      batch.push_back(std::move(g));
    }
    {
      std::lock_guard lock(mu_);
      if (!running_) return runtime_error("the native target is not running; call setup() first");
      for (auto& g : batch) pending_.push_back(std::move(g));
      live_count_ += static_cast<int>(batch.size());
    }
    wake_.notify_all();
    return Ok{};
  }

  void drain() override {
    std::unique_lock lock(mu_);
    idle_.wait(lock, [&] { return live_count_ == 0 || !running_; });
  }

  void cancel_all() override {
    {
      std::lock_guard lock(mu_);
      cancel_requested_ = true;
    }
    wake_.notify_all();
  }

  void teardown() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  std::string describe_json() const override {
    std::lock_guard lock(mu_);
    return description_;
  }

  std::optional<TargetMemory> memory() const override {
    std::lock_guard lock(mu_);
    if (!has_memory_) return std::nullopt;
    return memory_;
  }

 private:
  struct Live {
    int prompt_tokens = 0;
    int output_tokens = 0;
    bool aborting = false;
  };

  // ---- engine thread ----
  void engine_thread(std::promise<Status>& ready) {
    auto backend = create_backend(options_.backend);
    if (!backend.ok()) return ready.set_value(backend.error());
    backend_ = std::move(backend).value();
    if (options_.trace_allocations) backend_->memory().set_tracing(true);
    auto engine = create_engine(options_.model, options_.weights, options_.engine, *backend_);
    if (!engine.ok()) {
      backend_.reset();
      return ready.set_value(engine.error());
    }
    engine_ = std::move(engine).value();
    {
      std::lock_guard lock(mu_);
      description_ = describe(*engine_, *backend_, options_).dump();
      memory_ = memory_of(engine_->stats());
      has_memory_ = true;
      running_ = true;
    }
    ready.set_value(Ok{});
    loop();
    engine_.reset();  // before the backend that owns its memory
    if (options_.on_allocation_trace) options_.on_allocation_trace(backend_->memory().take_trace());
    backend_.reset();
  }

  void loop() {
    std::deque<GenerationRequest> incoming;
    for (;;) {
      incoming.clear();
      bool cancel = false;
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [&] {
          return stop_ || cancel_requested_ || !pending_.empty() ||
                 (engine_->has_unfinished() && !broken_);
        });
        if (stop_) {
          running_ = false;
          incoming.swap(pending_);
          break;
        }
        incoming.swap(pending_);
        cancel = std::exchange(cancel_requested_, false);
      }
      for (auto& g : incoming) {
        if (cancel || broken_) {
          finish(g.id, false, "aborted", broken_ ? broken_message_ : "cancelled", now_ns());
          continue;
        }
        const uint64_t id = g.id;
        const int n_prompt = static_cast<int>(g.prompt_tokens.size());
        Status st = engine_->add_request(std::move(g));
        if (!st.ok()) {
          finish(id, false, "error", st.error().message, now_ns());
          continue;
        }
        live_[id] = Live{n_prompt, 0, false};
      }
      if (cancel) abort_live();
      if (engine_->has_unfinished() && !broken_) step();
      finish_orphans();
    }
    // Torn down with work left: every request still gets its on_done.
    for (const auto& g : incoming)
      finish(g.id, false, "aborted", "the target was torn down", now_ns());
    std::vector<uint64_t> ids;
    for (const auto& [id, live] : live_) ids.push_back(id);
    for (uint64_t id : ids) finish(id, false, "aborted", "the target was torn down", now_ns());
  }

  void step() {
    auto out = engine_->step();
    if (!out.ok()) {
      // A device failure: fail everything in flight and refuse further work.
      broken_ = true;
      broken_message_ = out.error().message;
      std::vector<uint64_t> ids;
      for (const auto& [id, live] : live_) ids.push_back(id);
      for (uint64_t id : ids) finish(id, false, "error", broken_message_, now_ns());
      return;
    }
    if (options_.on_step) options_.on_step(out->stats);
    if (!out->stats.oom) {
      // Before the events: the runner may read the description as soon as the last request
      // finishes. Idle: refresh it, so result.json carries the step profile of the whole run.
      std::lock_guard lock(mu_);
      memory_ = memory_of(engine_->stats());
      if (!engine_->has_unfinished()) description_ = describe(*engine_, *backend_, options_).dump();
    }
    for (const TokenEvent& ev : out->events) {
      auto it = live_.find(ev.request_id);
      if (it == live_.end()) continue;
      if (ev.finish == FinishReason::kAborted) {
        finish(ev.request_id, false, "aborted", "cancelled", ev.time_ns);
        continue;
      }
      ++it->second.output_tokens;
      cb_.on_tokens(ev.request_id, 1, ev.time_ns);
      if (ev.finish != FinishReason::kNone) {
        finish(ev.request_id, true, finish_reason_name(ev.finish), "", ev.time_ns);
      }
    }
    if (out->stats.oom) {
      // The KV pool could not grow: the run ends here, marked out of memory (no crash, no leak:
      // the engine frees the requests' blocks).
      broken_ = true;
      broken_message_ = "out of memory: " + engine_->stats().oom_message;
      std::vector<uint64_t> ids;
      for (const auto& [id, live] : live_) ids.push_back(id);
      for (uint64_t id : ids) engine_->abort_request(id);
      {
        // The description (with its "oom" section) first: the runner may read it as soon as
        // the last request below is finished.
        std::lock_guard lock(mu_);
        memory_ = memory_of(engine_->stats());
        description_ = describe(*engine_, *backend_, options_).dump();
      }
      for (uint64_t id : ids) finish(id, false, "error", broken_message_, now_ns());
    }
  }

  void abort_live() {
    for (auto& [id, live] : live_) {
      live.aborting = true;
      engine_->abort_request(id);
    }
  }

  // Aborted requests the engine dropped without an event (it has nothing left to run).
  void finish_orphans() {
    if (engine_->has_unfinished() || live_.empty()) return;
    std::vector<uint64_t> ids;
    for (const auto& [id, live] : live_) ids.push_back(id);
    for (uint64_t id : ids) {
      const bool aborting = live_[id].aborting;
      finish(id, false, aborting ? "aborted" : "error",
             aborting ? "cancelled" : "the engine finished without completing the request",
             now_ns());
    }
  }

  void finish(uint64_t id, bool ok, const std::string& reason, const std::string& error,
              int64_t time_ns) {
    RequestOutcome o;
    o.ok = ok;
    o.error = error;
    o.finish_reason = reason;
    o.time_ns = time_ns;
    if (auto it = live_.find(id); it != live_.end()) {
      o.prompt_tokens = it->second.prompt_tokens;
      o.output_tokens = it->second.output_tokens;
      live_.erase(it);
    }
    cb_.on_done(id, o);
    {
      std::lock_guard lock(mu_);
      --live_count_;
    }
    idle_.notify_all();
  }

  NativeTargetOptions options_;
  TargetCallbacks cb_;
  std::thread thread_;

  mutable std::mutex mu_;
  std::condition_variable wake_;           // the engine thread waits on it
  std::condition_variable idle_;           // drain() waits on it
  std::deque<GenerationRequest> pending_;  // guarded by mu_
  bool cancel_requested_ = false;          // guarded by mu_
  bool stop_ = false;                      // guarded by mu_
  bool running_ = false;                   // guarded by mu_
  int live_count_ = 0;                     // submitted, not finished; guarded by mu_
  std::string description_;                // guarded by mu_
  TargetMemory memory_;                    // guarded by mu_
  bool has_memory_ = false;                // guarded by mu_

  // Engine thread only.
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Engine> engine_;
  std::unordered_map<uint64_t, Live> live_;
  bool broken_ = false;
  std::string broken_message_;
};

}  // namespace

std::unique_ptr<Target> make_native_target(NativeTargetOptions options) {
  return std::make_unique<NativeTarget>(std::move(options));
}

}  // namespace ib
