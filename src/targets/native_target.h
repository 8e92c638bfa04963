// The "native" target: the embedded engine in this process, on an AsyncEngine (engine/
// async_engine.h), whose thread creates, steps and destroys the backend and the Engine. Callbacks
// come from that thread with the engine's own timestamps (taken right after sampling, on the one
// clock); describe_json() and memory() read its snapshots and are safe from any thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "backend/backend.h"
#include "engine/calibration.h"
#include "engine/engine.h"
#include "engine/model_weights.h"
#include "model/config.h"
#include "targets/target.h"
#include "trace/trace.h"

namespace ib {

// Static activation scales (--calibration): calibrate() runs the prompts on the engine once its
// weights have loaded, inside setup(), so before any request (warm-ups included) is sent.
struct NativeCalibration {
  CalibrationOptions options;
  std::vector<std::vector<int32_t>> prompts;  // token ids, each (prompt_len)
};

struct NativeTargetOptions {
  ModelConfig model;
  WeightOptions weights;
  EngineConfig engine;
  BackendOptions backend;
  SamplingParams sampling;                       // request r samples with seed sampling.seed + r.id
  bool ignore_eos = true;                        // benchmarks generate exactly output_len tokens
  std::optional<NativeCalibration> calibration;  // nullopt: dynamic (per-token) activation scales
  // --otlp-endpoint: each request's spans (an INTERNAL request span with queue, prefill and
  // decode children; trace.h's RequestTiming), exported over OTLP from the engine thread
  // without blocking it. No detokenize span: a benchmark counts tokens and makes no text.
  TraceOptions trace;
  // A vision-language model's encoder, made on the engine's backend once the engine is (null: a
  // text-only model, whose requests must hold no images).
  std::function<Result<std::unique_ptr<VisionEncoder>>(Backend&)> vision_encoder;

  // Telemetry hooks (optional), called on the engine thread: every step's stats as it ends;
  // with trace_allocations, the tracked allocator's alloc/free trace (from before the weights
  // load to after the engine is destroyed) once, at teardown.
  std::function<void(const StepStats&)> on_step;
  bool trace_allocations = false;
  std::function<void(std::vector<MemoryEvent>)> on_allocation_trace;
};

std::unique_ptr<Target> make_native_target(NativeTargetOptions options);

}  // namespace ib
