// Target: what a benchmark drives — the in-process engine ("native") or, later, an HTTP server.
// The seed's plugin interface (Setup / Run / Teardown) maps onto setup / submit / teardown.
//
// Call order: setup() once, then any number of submit() (from the runner's thread), then
// drain() and teardown(). Callbacks are invoked from the target's own thread(s), never
// concurrently for the same request; timestamps come from the one clock (core/clock.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace ib {

// One image of a request to a vision-language model: a PNG or JPEG file, or (path empty) a random
// RGB image of width_px x height_px drawn from seed (--dataset-name random-mm).
struct RequestImage {
  std::string path;
  int64_t width_px = 0;
  int64_t height_px = 0;
  uint64_t seed = 0;
};

// An image preprocessed for the model before the run (the engine's ImageInput): its pixel values,
// the position of its first visual token in the request's prompt_tokens and, for a
// dynamic-resolution model (Qwen2-VL), its patch grid (t, h, w).
struct PreparedImage {
  int start_pos = 0;
  std::vector<float> pixel_values;
  std::vector<int64_t> grid_thw;  // empty: a fixed-size model's image (LLaVA)
};

struct RequestSpec {
  uint64_t id = 0;
  std::vector<int32_t> prompt_tokens;  // token ids (random workloads, token-id datasets)
  std::string prompt_text;             // text (text datasets); used when prompt_tokens is empty
  int input_len = 0;                   // prompt length in tokens
  int output_len = 0;                  // requested output tokens
  // The LoRA adapter the request asks for (--lora-assignment over --lora-modules): the engine's
  // adapter name (native), or the request's "model" (openai); empty: the base model.
  std::string lora_name;
  // Images, in prompt order, their visual tokens before the prompt's (vision-language models).
  std::vector<RequestImage> images;
  // The images preprocessed by the model's vision side before the run, their visual tokens
  // already in prompt_tokens (native target; cli/model_vision.h); shared by a run's copies.
  std::shared_ptr<const std::vector<PreparedImage>> prepared_images;
  // A multimodal-RoPE model's (Qwen2-VL's) prompt positions, (3, prompt length) row-major, set
  // with prepared_images; null: the engine's default (position = index).
  std::shared_ptr<const std::vector<int32_t>> mrope_positions;
};

struct RequestOutcome {
  bool ok = true;
  std::string error;      // status and body excerpt / engine message when !ok
  int prompt_tokens = 0;  // as counted by the target (engine: exact; HTTP: usage)
  int output_tokens = 0;
  std::string finish_reason;  // "length", "stop", "aborted", "error"
  int64_t time_ns = 0;
  // Native target, from the engine: the prompt's visual tokens, its images' time in the vision
  // encoder, when the engine first scheduled its prefill (0: unknown), and the KV cache bytes of
  // its tokens (prompt and output) at the end.
  int visual_tokens = 0;
  int64_t encode_ns = 0;
  int64_t first_scheduled_ns = 0;
  int64_t kv_bytes = 0;
};

struct TargetCallbacks {
  // A chunk of num_tokens content tokens arrived at time_ns.
  std::function<void(uint64_t id, int num_tokens, int64_t time_ns)> on_tokens;
  // The request finished (successfully or not); no callback for it follows.
  std::function<void(uint64_t id, const RequestOutcome& outcome)> on_done;
};

// The engine's own memory pools, where the target can see them (native engine).
struct TargetMemory {
  int64_t weights_bytes = 0;
  int64_t kv_pool_bytes = 0;
  int64_t kv_used_bytes = 0;
  int64_t kv_peak_used_bytes = 0;
  int64_t activations_bytes = 0;  // activations + workspace
  int64_t graph_bytes = 0;        // CUDA-graph pools
  int64_t allocated_bytes = 0;    // everything the tracked allocator holds
  int64_t peak_allocated_bytes = 0;
  // Tensor parallelism: each rank's demand (its weights, KV blocks in use, activations and
  // graphs), rank 0's first; empty at one rank (the fields above are rank 0's).
  std::vector<int64_t> rank_demand_bytes;
};

class Target {
 public:
  virtual ~Target() = default;
  virtual std::string name() const = 0;
  // Loads the model / connects. Runtime or user errors are returned.
  virtual Status setup(TargetCallbacks callbacks) = 0;
  // Hands one request to the target; returns once it is accepted (not completed).
  virtual Status submit(const RequestSpec& request) = 0;
  // Hands a static batch over at once, so the target can start its requests together (the
  // seed's fixed-batch protocol). The default submits them one by one.
  virtual Status submit_batch(const std::vector<RequestSpec>& requests) {
    for (const auto& r : requests) IB_TRY(submit(r));
    return Ok{};
  }
  // Blocks until every submitted request has produced on_done.
  virtual void drain() = 0;
  // Cancels everything in flight (each gets on_done with finish_reason "aborted").
  virtual void cancel_all() = 0;
  virtual void teardown() = 0;

  // Description for result.json: model, device, dtype, weights, engine settings.
  virtual std::string describe_json() const = 0;
  virtual std::optional<TargetMemory> memory() const { return std::nullopt; }
};

}  // namespace ib
