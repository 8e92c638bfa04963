#include "targets/native_target.h"
#include "backend/backend_factory.h"

#include <string>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "engine/async_engine.h"
#include "targets/detail/profile_json.h"
#include "targets/detail/routing_json.h"
#include "targets/detail/trace_json.h"

namespace ib {
namespace {

using nlohmann::json;

// The calibration the engine ran (--calibration), or null: its settings and its time (not in any
// measured number: it ran before the first request).
json calibration_json(const NativeTargetOptions& o, double seconds) {
  if (!o.calibration) return nullptr;
  const CalibrationOptions& c = o.calibration->options;
  return json{{"method", calibration_method_name(c.method)},
              {"scheme", activation_scheme_name(c.scheme)},
              {"percentile",
               c.method == CalibrationMethod::kPercentile ? json(c.percentile) : json(nullptr)},
              {"prompts", o.calibration->prompts.size()},
              {"seconds", seconds}};
}

// A tensor-parallel engine's group: the communicator (NCCL's version with it) and each rank's
// device; null for one rank. How the GPUs connect is the environment's (env.gpus.links).
json tensor_parallel_json(const TensorParallelGroup& g) {
  if (g.communicator.empty()) return nullptr;
  json ranks = json::array();
  for (size_t r = 0; r < g.devices.size(); ++r) {
    const DeviceInfo& d = g.devices[r];
    ranks.push_back(json{{"rank", r},
                         {"device", d.kind + ":" + std::to_string(d.index)},
                         {"name", d.name},
                         {"total_bytes", d.total_bytes}});
  }
  return json{{"communicator", g.communicator}, {"ranks", ranks}};
}

// What never changes while the engine lives: model, device, dtype, weights, engine settings.
json describe_fixed(const Engine& engine, Backend& backend, const NativeTargetOptions& o,
                    double calibration_s) {
  const ModelConfig& m = engine.model_config();
  const EngineConfig& e = engine.config();
  const DeviceInfo d = backend.device_info();
  // What the cache stores (auto resolved; the config was validated).
  const DType kv_dtype = kv_cache_dtype_for(e.kv_cache_dtype, backend.activation_dtype()).value();
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
        {"max_num_seqs", e.max_num_seqs},
        {"max_num_batched_tokens", e.max_num_batched_tokens},
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
        {"quantization", e.quantization},
        {"calibration", calibration_json(o, calibration_s)},
        {"kv_cache_dtype", e.kv_cache_dtype},
        {"kv_dtype", dtype_name(kv_dtype)},
        {"block_sparse_attention", e.block_sparse_attention},  // "": dense
        {"tensor_parallel_size", e.tensor_parallel_size},
        {"tensor_parallel", tensor_parallel_json(engine.tensor_parallel_group())},
        // Per token, all layers: what the cache holds (MLA: the latent and the rope key), and
        // what ordinary attention's K and V of every KV head would take, for comparison.
        {"kv_layout", m.mla.kv_lora_rank > 0 ? "mla-latent" : "gqa"},
        {"kv_bytes_per_token", m.kv_bytes_per_token(kv_dtype)},
        {"kv_bytes_per_token_gqa", m.gqa_kv_bytes_per_token(kv_dtype)}}},
      {"sampling",
       {{"temperature", o.sampling.temperature},
        {"top_k", o.sampling.top_k},
        {"top_p", o.sampling.top_p},
        {"seed", o.sampling.seed},
        {"ignore_eos", o.ignore_eos}}},
  };
}

// The bytes a tracked allocator holds under tag; activations: the activations and workspace.
int64_t tagged_bytes(const MemorySnapshot& m, MemoryTag tag) {
  const auto at = [&](MemoryTag t) { return m.bytes_by_tag[static_cast<size_t>(t)]; };
  return tag == MemoryTag::kActivations ? at(MemoryTag::kActivations) + at(MemoryTag::kWorkspace)
                                        : at(tag);
}

// The fixed part with the engine's latest stats and step profile.
json describe(const json& fixed, const EngineStats& s, const EngineProfile& p) {
  json j = fixed;
  json& e = j["engine"];
  e["num_kv_blocks"] = s.kv_blocks_total;
  e["kv_block_bytes"] = s.kv_block_bytes;
  e["kv_pool_bytes"] = s.kv_block_bytes * s.kv_blocks_total;
  e["kv_tokens"] = int64_t{s.kv_blocks_total} * e["block_size"].get<int64_t>();
  e["max_model_len"] = s.max_model_len;
  e["kv_blocks_capacity"] = s.kv_blocks_capacity;
  e["kv_growths"] = s.kv_growths;
  e["kv_growths_staged"] = s.kv_growths_staged;
  e["kv_growth_s"] = s.kv_growth_s;
  // Tensor parallelism: where each rank's device memory goes (its tracked allocator).
  json* group = e.contains("tensor_parallel") ? &e["tensor_parallel"] : nullptr;
  for (size_t r = 0;
       group && group->is_object() && r < s.rank_memory.size() && r < (*group)["ranks"].size();
       ++r) {
    const MemorySnapshot& m = s.rank_memory[r];
    json& rank = (*group)["ranks"][r];
    rank["weights_bytes"] = tagged_bytes(m, MemoryTag::kWeights);
    rank["kv_cache_bytes"] = tagged_bytes(m, MemoryTag::kKvCache);
    rank["activations_bytes"] = tagged_bytes(m, MemoryTag::kActivations);
    rank["graph_bytes"] = tagged_bytes(m, MemoryTag::kGraph);
    rank["allocated_bytes"] = m.allocated_bytes;
    rank["peak_allocated_bytes"] = m.peak_allocated_bytes;
  }
  j["oom"] = json{{"oom", s.oom},
                  {"steps_before_oom", s.oom ? json(s.oom_step) : json(nullptr)},
                  {"message", s.oom_message},
                  {"preemptions", s.preemptions},
                  {"first_preemption_step",
                   s.first_preemption_step >= 0 ? json(s.first_preemption_step) : json(nullptr)},
                  {"steps", s.steps},
                  {"peak_allocated_bytes", s.memory.peak_allocated_bytes},
                  {"refused_allocations", s.memory.num_refused}};
  j["performance"] = profile_json(p);
  if (!s.expert_tokens.empty()) j["routing"] = routing_json(s);
  return j;
}

TargetMemory memory_of(const EngineStats& s) {
  TargetMemory m;
  m.weights_bytes = s.weight_bytes;
  m.kv_pool_bytes = s.kv_block_bytes * s.kv_blocks_total;
  m.kv_used_bytes = s.kv_block_bytes * s.kv_blocks_used;
  m.kv_peak_used_bytes = s.kv_block_bytes * s.kv_blocks_peak;
  m.activations_bytes = tagged_bytes(s.memory, MemoryTag::kActivations);
  m.graph_bytes = tagged_bytes(s.memory, MemoryTag::kGraph);
  m.allocated_bytes = s.memory.allocated_bytes;
  m.peak_allocated_bytes = s.memory.peak_allocated_bytes;
  // Each rank's pool holds the same blocks (one scheduler): its KV bytes in use are its pool's
  // bytes in the same proportion.
  for (const MemorySnapshot& r : s.rank_memory) {
    const int64_t kv_used = s.kv_blocks_total > 0 ? tagged_bytes(r, MemoryTag::kKvCache) *
                                                        s.kv_blocks_used / s.kv_blocks_total
                                                  : 0;
    m.rank_demand_bytes.push_back(tagged_bytes(r, MemoryTag::kWeights) + kv_used +
                                  tagged_bytes(r, MemoryTag::kActivations) +
                                  tagged_bytes(r, MemoryTag::kGraph));
  }
  return m;
}

// The native target is a thin adapter: RequestSpec -> GenerationRequest, the AsyncEngine's
// request ends -> RequestOutcome, its snapshots -> describe_json() and memory().
class NativeTarget : public Target {
 public:
  explicit NativeTarget(NativeTargetOptions options)
      : options_(std::move(options)), engine_(engine_options()) {}
  ~NativeTarget() override { teardown(); }

  std::string name() const override { return "native"; }

  Status setup(TargetCallbacks callbacks) override {
    cb_ = std::move(callbacks);
    if (!options_.trace.endpoint.empty()) {
      IB_ASSIGN_OR_RETURN(tracer_, make_tracer(options_.trace));
    }
    return engine_.start();
  }

  Status submit(const RequestSpec& r) override { return submit_batch({r}); }

  // All requests of a batch enter the queue under one lock: the engine thread sees them together.
  Status submit_batch(const std::vector<RequestSpec>& requests) override {
    std::vector<Submission> batch;
    batch.reserve(requests.size());
    for (const RequestSpec& r : requests) {
      if (r.prompt_tokens.empty()) {
        return user_error("the native target needs token ids; the workload gave none");
      }
      if (!r.images.empty() && r.prepared_images == nullptr) {
        return user_error("request " + std::to_string(r.id) +
                          " holds images that were not prepared for the model; the native "
                          "target runs images on vision-language models only");
      }
      Submission s;
      s.request.id = r.id;
      s.request.prompt_tokens = r.prompt_tokens;
      s.request.max_tokens = r.output_len;
      s.request.sampling = options_.sampling;
      s.request.sampling.seed = options_.sampling.seed + r.id;
      s.request.ignore_eos = options_.ignore_eos;
      s.request.lora_name = r.lora_name;
      if (r.prepared_images != nullptr) {
        for (const PreparedImage& image : *r.prepared_images) {
          s.request.images.push_back(
              ImageInput{image.start_pos, image.pixel_values, image.grid_thw});
        }
      }
      if (r.mrope_positions != nullptr) s.request.mrope_positions = *r.mrope_positions;
      std::shared_ptr<RequestTiming> timing = tracer_ ? start_timing(r) : nullptr;
      s.callbacks.on_token = [this, timing](const TokenEvent& ev) {
        if (ev.output_index == 0) {
          first_[ev.request_id] = FirstToken{ev.visual_tokens, ev.encode_ns, ev.first_scheduled_ns};
        }
        if (timing) {
          if (ev.output_index == 0) {
            timing->step_start_ns = step_start_ns_;
            timing->first_token_ns = ev.time_ns;
          }
          timing->last_token_ns = ev.time_ns;
        }
        cb_.on_tokens(ev.request_id, 1, ev.time_ns);
      };
      s.callbacks.on_finish = [this, timing](uint64_t id, const RequestEnd& end) {
        finish(id, end, timing.get());
      };
      batch.push_back(std::move(s));
    }
    if (!engine_.submit(std::move(batch)).ok()) {
      return runtime_error("the native target is not running; call setup() first");
    }
    return Ok{};
  }

  void drain() override { engine_.wait_idle(); }
  void cancel_all() override { engine_.cancel_all(); }
  void teardown() override {
    engine_.shutdown();
    if (tracer_) tracer_->shutdown();  // the last spans, within the export timeout
  }

  std::string describe_json() const override {
    if (fixed_.is_null()) return "";
    json j = describe(fixed_, engine_.stats(), engine_.profile());
    j["traces"] = tracer_ ? traces_json(options_.trace, *tracer_) : json();
    return j.dump();
  }

  std::optional<TargetMemory> memory() const override {
    if (fixed_.is_null()) return std::nullopt;
    return memory_of(engine_.stats());
  }

 private:
  AsyncEngineOptions engine_options() {
    AsyncEngineOptions o;
    o.fail_on_oom = true;  // the run ends, marked out of memory
    o.factory = [this]() -> Result<EngineInstance> {
      EngineInstance instance;
      IB_ASSIGN_OR_RETURN(instance.backend, create_backend(options_.backend));
      if (options_.trace_allocations) instance.backend->memory().set_tracing(true);
      IB_ASSIGN_OR_RETURN(instance.engine, create_engine(options_.model, options_.weights,
                                                         options_.engine, *instance.backend));
      if (options_.vision_encoder) {
        IB_ASSIGN_OR_RETURN(auto encoder, options_.vision_encoder(*instance.backend));
        IB_TRY(instance.engine->set_vision_encoder(std::move(encoder)));
      }
      if (options_.calibration) {
        const int64_t start_ns = now_ns();
        IB_TRY(calibrate(*instance.engine, options_.calibration->prompts,
                         options_.calibration->options));
        calibration_s_ = static_cast<double>(now_ns() - start_ns) * 1e-9;
      }
      return instance;
    };
    // Before start() returns, on the engine thread: what never changes while the engine lives.
    o.hooks.on_ready = [this](Engine& engine) {
      fixed_ = describe_fixed(engine, engine.backend(), options_, calibration_s_);
      kv_bytes_per_token_ = engine.stats().kv_block_bytes / engine.config().block_size;
    };
    if (options_.on_step || !options_.trace.endpoint.empty()) {
      // Before the step's token events: their first tokens' prefill began at this step's start.
      o.hooks.on_step = [this](Engine&, const StepStats& s) {
        step_start_ns_ = s.start_ns;
        if (options_.on_step) options_.on_step(s);
      };
    }
    if (options_.on_allocation_trace) {
      o.hooks.on_engine_destroyed = [this](Backend& backend) {
        options_.on_allocation_trace(backend.memory().take_trace());
      };
    }
    return o;
  }

  // A traced request's facts, as submit_batch() hands it to the engine; from then on only the
  // engine thread touches it.
  std::shared_ptr<RequestTiming> start_timing(const RequestSpec& r) const {
    auto t = std::make_shared<RequestTiming>();
    t->kind = SpanKind::kInternal;  // the engine in this process, no remote caller
    t->operation = "text_completion";
    t->served_model = options_.model.name;
    t->requested_model = r.lora_name.empty() ? options_.model.name : r.lora_name;
    t->adapter = r.lora_name;
    t->request_id = r.id;
    t->max_tokens = r.output_len;
    t->prompt_tokens = static_cast<int>(r.prompt_tokens.size());
    t->arrival_ns = now_ns();
    t->submitted = true;
    return t;
  }

  // Engine thread.
  void finish(uint64_t id, const RequestEnd& end, RequestTiming* timing) {
    RequestOutcome o;
    o.ok = end.kind == RequestEndKind::kFinished;
    o.time_ns = end.time_ns;
    o.prompt_tokens = end.prompt_tokens;
    o.output_tokens = end.output_tokens;
    o.kv_bytes = kv_bytes_per_token_ * (end.prompt_tokens + end.output_tokens);
    if (auto it = first_.find(id); it != first_.end()) {
      o.visual_tokens = it->second.visual_tokens;
      o.encode_ns = it->second.encode_ns;
      o.first_scheduled_ns = it->second.first_scheduled_ns;
      first_.erase(it);
    }
    switch (end.kind) {
      case RequestEndKind::kFinished:
        o.finish_reason = finish_reason_name(end.finish);
        break;
      case RequestEndKind::kCancelled:
        o.finish_reason = "aborted";
        o.error = "cancelled";
        break;
      case RequestEndKind::kRejected:
      case RequestEndKind::kFailed:
        o.finish_reason = "error";
        o.error = end.error;
        break;
      case RequestEndKind::kUnavailable:
        o.finish_reason = "aborted";
        o.error = end.error;
        break;
      case RequestEndKind::kShutdown:
        o.finish_reason = "aborted";
        o.error = "the target was torn down";
        break;
    }
    if (timing) {
      timing->output_tokens = end.output_tokens;
      timing->finish_reason = o.finish_reason;
      timing->error = o.error;
      timing->end_ns = end.time_ns > 0 ? end.time_ns : now_ns();
      trace_request(*tracer_, *timing);
    }
    cb_.on_done(id, o);
  }

  // What a request's first token told (engine thread), until its end.
  struct FirstToken {
    int visual_tokens = 0;
    int64_t encode_ns = 0;
    int64_t first_scheduled_ns = 0;
  };

  NativeTargetOptions options_;
  TargetCallbacks cb_;
  std::unordered_map<uint64_t, FirstToken> first_;  // engine thread
  int64_t kv_bytes_per_token_ = 0;                  // written before setup() returns
  double calibration_s_ = 0;                        // written on the engine thread before on_ready
  json fixed_;  // written once on the engine thread before setup() returns; null if it failed
  std::unique_ptr<Tracer> tracer_;  // --otlp-endpoint; thread-safe; set before the engine starts
  int64_t step_start_ns_ = 0;       // engine thread: the last step's start (when tracing)
  AsyncEngine engine_;              // last: its thread uses the members above
};

}  // namespace

std::unique_ptr<Target> make_native_target(NativeTargetOptions options) {
  return std::make_unique<NativeTarget>(std::move(options));
}

}  // namespace ib
