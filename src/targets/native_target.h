// The "native" target: the embedded engine in this process. One engine thread owns the backend
// and the Engine (created, stepped and destroyed on it, which CUDA contexts require); submit(),
// drain() and cancel_all() hand work to it through a queue. Callbacks come from the engine thread
// with the engine's own timestamps (taken right after sampling, on the one clock).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "engine/engine.h"
#include "engine/model_weights.h"
#include "model/config.h"
#include "targets/target.h"

namespace ib {

struct NativeTargetOptions {
  ModelConfig model;
  WeightOptions weights;
  EngineConfig engine;
  BackendOptions backend;
  SamplingParams sampling;  // request r samples with seed sampling.seed + r.id
  bool ignore_eos = true;   // benchmarks generate exactly output_len tokens

  // Telemetry hooks (optional), called on the engine thread: every step's stats as it ends;
  // with trace_allocations, the tracked allocator's alloc/free trace (from before the weights
  // load to after the engine is destroyed) once, at teardown.
  std::function<void(const StepStats&)> on_step;
  bool trace_allocations = false;
  std::function<void(std::vector<MemoryEvent>)> on_allocation_trace;
};

std::unique_ptr<Target> make_native_target(NativeTargetOptions options);

}  // namespace ib
