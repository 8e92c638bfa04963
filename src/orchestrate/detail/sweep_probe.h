// Internal to orchestrate/: one engine probe on a backend the caller owns — a batch of identical
// requests (input_len random tokens, `steps` output tokens) stepped to completion, out of
// memory, or (optionally) the first preemption — and the OOM search built on it.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "engine/engine.h"

namespace ib::detail {

struct ProbeResult {
  int batch = 0;
  int input_len = 0;
  // Every request generated its tokens, all of them in flight at once, no OOM, no preemption.
  bool ok = false;
  bool oom = false;   // on demand: a refused KV growth; at engine creation: nothing fits
  int64_t steps = 0;  // engine steps completed
  int64_t steps_before_oom = -1;
  int64_t preemptions = 0;
  int64_t first_preemption_step = -1;
  int64_t peak_bytes = 0;          // tracked peak during the probe (weights included)
  int64_t engine_fixed_bytes = 0;  // after creation, without the KV pool: weights + activations
  int64_t kv_block_bytes = 0;
  int kv_blocks = 0;   // pool size at the end
  int concurrent = 0;  // most requests running at once
  double load_s = 0;
  double prefill_s = 0;       // first step
  double decode_step_s = 0;   // median of the later steps
  double total_s = 0;         // creation to destruction, the leak check included
  int kv_growths = 0;         // on demand: successful KV pool growths
  int kv_growths_staged = 0;  // of those, through host staging (old + new did not fit together)
  double kv_growth_s = 0;     // on demand: seconds spent growing the pool, refusals included
  std::string message;
};

struct ProbeSpec {
  ModelConfig model;
  WeightOptions weights;
  EngineConfig engine;
  int batch = 1;
  int input_len = 16;
  int steps = 8;
  uint64_t seed = 0;
  bool stop_at_preemption = true;
};

// Tokens each probe request generates: `steps`, plus one per extra engine step that chunked
// prefill (max_num_batched_tokens a step) needs to admit the whole batch, so that the first
// requests are still running when the last one enters.
int probe_max_tokens(const ProbeSpec& spec);

// Creates the engine, runs the probe, destroys it, and checks the tracker is back at its
// baseline (a leak is a runtime error naming the bytes).
Result<ProbeResult> run_probe(Backend& backend, const ProbeSpec& spec);

struct OomSearchOptions {
  ProbeSpec base;               // model, weights, engine limits, steps, seed
  std::vector<int> input_lens;  // largest batch per input length
  int max_batch = 1024;
  int context_batch = 0;  // > 0: longest context at this batch
  bool on_demand_and_preallocated = true;
  // Called after every probe with its record (plus "kv_cache_growth" and "search"), so a caller
  // can keep each finished probe on disk before the search ends (an interrupted search loses
  // none). Its error stops the search.
  std::function<Status(const nlohmann::json&)> on_probe;
};

// The search (doubling from 1, then bisection), for each KV growth mode; the JSON of oom.json.
Result<nlohmann::json> find_oom(Backend& backend, const OomSearchOptions& options,
                                const std::atomic<bool>& stop);
std::string oom_markdown(const nlohmann::json& oom);
std::string oom_headroom_svg(const nlohmann::json& oom);

}  // namespace ib::detail
