// Engine: continuous-batching LLM inference over a Backend. Requests go in with add_request();
// each step() schedules one batch (prefill chunks and decode tokens), runs the forward pass,
// samples, and returns the token events of that step stamped on the one clock.
//
// Threading: an Engine is driven by one thread at a time (the caller of step()); it is not
// internally synchronised. Targets that need concurrency wrap it in their own thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "engine/engine_config.h"
#include "engine/lora.h"
#include "engine/model_weights.h"
#include "model/config.h"

namespace ib {

struct SamplingParams {
  float temperature = 0.0f;  // 0: greedy
  int top_k = 0;             // <= 0: off
  float top_p = 1.0f;
  uint64_t seed = 0;
};

// One image of a request to a vision-language model (Engine::set_vision_encoder): its
// preprocessed pixel values and where its visual tokens sit in the prompt. The prompt holds the
// encoder's image_token_id at positions [start_pos, start_pos + tokens_per_image); at prefill
// their input embeddings are replaced by the encoder's outputs for this image.
struct ImageInput {
  int start_pos = 0;
  std::vector<float> pixel_values;  // VisionEncoder::pixel_values(*this) values
  // A dynamic-resolution encoder's (Qwen2-VL's) patch grid (t, h, w) of this image; empty for a
  // fixed-size encoder (LLaVA's).
  std::vector<int64_t> grid_thw;
};

// The vision side of a vision-language model (a vision tower and projector): turns images'
// pixel values into their visual tokens' input embeddings. The engine runs it at prefill, once
// per image, over all the images a step reaches at once, on the engine's thread.
class VisionEncoder {
 public:
  virtual ~VisionEncoder() = default;
  // A fixed-size encoder's counts per image; a dynamic-resolution one's depend on the image
  // (image_tokens, pixel_values below) and these return 0.
  virtual int64_t tokens_per_image() const = 0;
  virtual int64_t pixel_values_per_image() const = 0;
  virtual int32_t image_token_id() const = 0;

  // Per image: the visual tokens and pixel values an image takes. A fixed-size encoder's are the
  // counts above; a dynamic-resolution encoder overrides both (a user error for a grid it cannot
  // take).
  virtual Result<int64_t> image_tokens(const ImageInput& /*image*/) const {
    return tokens_per_image();
  }
  virtual int64_t pixel_values(const ImageInput& /*image*/) const {
    return pixel_values_per_image();
  }
  // What the engine calls: the images' visual-token embeddings into out (the sum of their
  // tokens, the language model's hidden size), image after image, in the activation dtype of the
  // backend the encoder was loaded on, which is the engine's. Enqueued on the backend (the engine
  // waits for it); the embeddings never pass through the host.
  virtual Status encode_images(std::span<const ImageInput* const> images, Tensor out) = 0;
};

struct GenerationRequest {
  uint64_t id = 0;                     // caller-chosen, unique among live requests
  std::vector<int32_t> prompt_tokens;  // non-empty
  int max_tokens = 16;                 // output tokens to generate (> 0)
  SamplingParams sampling;
  bool ignore_eos = true;               // benchmarks generate exactly max_tokens
  std::vector<int32_t> stop_token_ids;  // extra stop tokens (besides EOS when !ignore_eos)
  // >= 0: also return the logits after every prompt token from this position on (vLLM's
  // prompt_logprobs idea; perplexity), in StepOutput::prompt_logits; -1: none.
  int prompt_logits_from = -1;
  // The LoRA adapter to apply (a name given to Engine::add_lora); empty: the base model.
  std::string lora_name;
  // Images (a vision-language model only), in prompt order, their visual tokens not overlapping.
  std::vector<ImageInput> images;
  // Multimodal-RoPE models (ModelConfig::mrope_section): the prompt's 3-D positions, (3,
  // prompt length) row-major (temporal, height, width; Qwen2-VL's get_rope_index). Tokens after
  // the prompt continue from their maximum + 1. Empty: position = index in all three rows.
  std::vector<int32_t> mrope_positions;
};

enum class FinishReason { kNone, kLength, kStop, kAborted };
const char* finish_reason_name(FinishReason r);

struct TokenEvent {
  uint64_t request_id = 0;
  int32_t token = 0;     // -1 for the event that reports an abort
  int output_index = 0;  // 0 for the first generated token (abort: the number generated)
  int64_t time_ns = 0;   // when the token became available (after sampling), on the one clock
  FinishReason finish = FinishReason::kNone;  // kNone while the request continues
  std::vector<float> logits;                  // only with EngineConfig::capture_logits
  // Only with EngineConfig::capture_routing on a mixture-of-experts model: per layer the k
  // experts the token that produced this one was routed to (L x k, layer-major, the router's
  // order: descending score; -1 on a dense layer).
  std::vector<int32_t> routing;
  // On a request's first token (output_index 0): its visual tokens (images x tokens_per_image)
  // and the time its images spent in the vision encoder (each encoder batch's wall time counts
  // in full for every request that had an image in it); 0 without images.
  int visual_tokens = 0;
  int64_t encode_ns = 0;
  // On a request's first token: when the first step that computed part of its prompt began (its
  // time in the engine's queue ends there; a preempted request keeps its first).
  int64_t first_scheduled_ns = 0;
};

struct StepStats {
  int num_seqs = 0;
  int num_prefill_tokens = 0;
  int num_decode_tokens = 0;
  int num_images_encoded = 0;  // images through the vision encoder in this step
  int64_t encode_ns = 0;       // the encoder's wall time in this step (part of duration_ns)
  int num_preempted = 0;       // sequences preempted (recompute) during scheduling
  int64_t start_ns = 0;
  int64_t duration_ns = 0;
  int64_t bytes_moved = 0;  // weights streamed + KV read + KV written (the step's floor)
  int64_t device_ns = -1;   // device time of the forward pass; -1 when not measured
  // Host clock (now_ns) when the batch was built (scheduling done), when the device work was
  // enqueued (a graph's replay or the ops launched) and when its results were on the host; 0 for
  // a step that ran nothing.
  int64_t run_start_ns = 0, launched_ns = 0, synced_ns = 0;
  bool graph = false;  // a decode graph was replayed
  bool oom = false;    // kOnDemand: a KV growth was refused in this step

  // The step's host phases from its clocks, ns: scheduling and building the batch, enqueueing
  // the device work, waiting for its results, token bookkeeping. False (phases untouched) for a
  // step that ran nothing or whose clocks are out of order.
  struct HostPhases {
    int64_t schedule_ns = 0, launch_ns = 0, wait_ns = 0, finish_ns = 0;
  };
  bool host_phases(HostPhases& out) const {
    const int64_t end_ns = start_ns + duration_ns;
    if (run_start_ns <= 0 || launched_ns < run_start_ns || synced_ns < launched_ns ||
        end_ns < synced_ns || run_start_ns < start_ns)
      return false;
    out = {run_start_ns - start_ns, launched_ns - run_start_ns, synced_ns - launched_ns,
           end_ns - synced_ns};
    return true;
  }
};

// Where the time of a class of steps went, accumulated since the engine started.
struct StepClassProfile {
  int64_t steps = 0;
  int64_t tokens = 0;
  int64_t bytes = 0;                // sum of StepStats::bytes_moved
  int64_t wall_ns = 0;              // sum of step durations (host and device)
  int64_t device_ns = 0;            // sum over the steps whose device time was measured
  int64_t timed_steps = 0;          // steps with a device time
  int64_t graph_steps = 0;          // decode steps that replayed a graph
  double median_step_ns = 0;        // median step duration
  double median_device_ns = 0;      // median device time (timed steps)
  double median_host_fraction = 0;  // median over timed steps of (wall - device) / wall
  double p95_step_ns = 0;           // 95th percentile step duration (jitter = p95 - median)
  // Medians of a step's host phases (StepStats' clocks), ns: scheduling and building the batch,
  // enqueueing the device work (metadata upload, graph launch), waiting for its results,
  // finishing (token bookkeeping), and the time from the previous step's end to this one's start
  // (the engine loop: events delivered, arrivals admitted); steps that followed a step only.
  double median_schedule_ns = 0, median_launch_ns = 0, median_wait_ns = 0, median_finish_ns = 0,
         median_between_steps_ns = 0;
};

struct EngineProfile {
  StepClassProfile decode;   // steps with only decode tokens
  StepClassProfile prefill;  // steps with prompt tokens (mixed steps included)
  int num_graphs = 0;
  std::vector<int> graph_buckets;
  int64_t graph_bytes = 0;              // device memory of the graphs' instantiation
  double copy_ceiling_bytes_per_s = 0;  // the backend's measured copy bandwidth; 0 if none
};

// Logits after prompt tokens (GenerationRequest::prompt_logits_from). Row i follows the token at
// position start_pos + i: it is the distribution of the token at start_pos + i + 1 (the last
// prompt position's row is the one the first output token is sampled from). A prompt's rows come
// in position order, over as many steps as its prefill takes, each position once (a sequence
// preempted and recomputed does not deliver its rows again).
struct PromptLogits {
  uint64_t request_id = 0;
  int start_pos = 0;
  int num_positions = 0;
  std::vector<float> logits;  // (num_positions, vocab) f32
};

struct StepOutput {
  std::vector<TokenEvent> events;
  std::vector<PromptLogits> prompt_logits;  // requests with prompt_logits_from >= 0
  StepStats stats;
};

struct EngineStats {
  int64_t steps = 0;
  int64_t preemptions = 0;
  int64_t first_preemption_step = -1;  // steps completed before the first preemption; -1: none
  bool oom = false;                    // kOnDemand: a KV growth was refused
  int64_t oom_step = -1;               // steps completed before the refusal; -1: none
  std::string oom_message;             // the allocator's message
  int kv_growths = 0;                  // kOnDemand: successful pool growths
  int kv_growths_staged =
      0;                   // of kv_growths, through host staging (old + new did not fit together)
  double kv_growth_s = 0;  // kOnDemand: seconds spent growing, refusals included
  int kv_blocks_capacity = 0;  // most blocks the pool may reach (= total when preallocated)
  int num_waiting = 0;
  int num_running = 0;
  int kv_blocks_total = 0;
  int kv_blocks_used = 0;
  int kv_blocks_peak = 0;
  int64_t kv_block_bytes = 0;
  int64_t weight_bytes = 0;
  int max_model_len = 0;
  MemorySnapshot memory;  // the backend's tracked allocator
  // A tensor-parallel engine: every rank's tracked allocator, rank 0's (memory) first; empty at
  // one rank.
  std::vector<MemorySnapshot> rank_memory;
  // Mixture-of-experts models: tokens routed to each expert of each layer since the engine was
  // created, (layers, num_experts) row-major (each token counted once per expert it picks);
  // empty for dense models.
  std::vector<int64_t> expert_tokens;
  int num_experts = 0;
  int experts_per_token = 0;
};

// A tensor-parallel engine's group (issue 19): its communicator as it describes itself ("cpu
// threads, 2 ranks", "nccl 2.21.5, 2 ranks") and each rank's device, in rank order.
struct TensorParallelGroup {
  std::string communicator;
  std::vector<DeviceInfo> devices;
};

// One rank's weights and the backend that holds them (Engine::calibration_ranks).
struct CalibrationRank {
  ModelWeights* weights = nullptr;
  Backend* backend = nullptr;
};

class Engine {
 public:
  virtual ~Engine() = default;

  // Queues a request. User errors: empty prompt, max_tokens <= 0, prompt + max_tokens beyond
  // max_model_len or beyond what the KV pool can ever hold, token ids outside the vocabulary,
  // prompt_logits_from outside [-1, prompt length), images without a vision encoder, of the wrong
  // size, out of order or not on image_token_id placeholders (and, with images, placeholders
  // left without one; a text-only request may hold the image token id); mrope_positions not
  // (3, prompt length), negative, for a model without mrope_section, or missing where images go
  // to a model with one.
  virtual Status add_request(GenerationRequest request) = 0;
  // Finishes a request early (kAborted event on the next step) and frees its KV blocks.
  virtual void abort_request(uint64_t id) = 0;
  // One scheduler iteration. A runtime error (device failure) is returned, not thrown.
  virtual Result<StepOutput> step() = 0;
  virtual bool has_unfinished() const = 0;

  virtual EngineStats stats() const = 0;
  virtual EngineProfile profile() const = 0;
  // Forgets the steps profile() sums (not stats()): steps run before, calibration's
  // (engine/calibration.h), are not the benchmark's. Call while idle.
  virtual void reset_profile() = 0;
  virtual const ModelConfig& model_config() const = 0;
  virtual const EngineConfig& config() const = 0;
  virtual const std::string& weights_description() const = 0;
  virtual Backend& backend() = 0;  // rank 0's under tensor parallelism
  // Empty (no communicator, no devices) for an engine of one rank.
  virtual TensorParallelGroup tensor_parallel_group() const = 0;
  // Every rank's weights and the backend holding them, rank 0's first (one entry at one rank),
  // for calibration (engine/calibration.h) to set static activation scales on; nothing else
  // changes weights after creation.
  virtual std::vector<CalibrationRank> calibration_ranks() = 0;
  // Records the decode graphs again (where the engine has them), after calibration changed how
  // the weights' matmuls run; the engine must be idle.
  virtual Status record_graphs_again() = 0;

  // LoRA adapters (EngineConfig::enable_lora), served unmerged: each loaded adapter holds one of
  // the max_loras device slots until removed, and a batch mixes adapters freely. add_lora:
  // user errors when LoRA is off, the name is taken, every slot is held (the message names
  // --max-loras), or the rank exceeds max_lora_rank. remove_lora: user errors for an unknown name
  // or one that live requests still use. Call between steps (the engine's thread).
  virtual Status add_lora(const std::string& name, const LoraAdapter& adapter) = 0;
  virtual Status remove_lora(const std::string& name) = 0;
  virtual std::vector<std::string> lora_names() const = 0;  // in load order

  // Vision-language models: the encoder of the requests' images (its hidden size the model's),
  // set once before the first request; null until then (a request with images is a user error).
  virtual Status set_vision_encoder(std::unique_ptr<VisionEncoder> encoder) = 0;
  virtual const VisionEncoder* vision_encoder() const = 0;
};

// --block-sparse-attention (pattern, EngineConfig::block_sparse_attention) runs on the paged
// attention op of every layer: a user error for a model with multi-head latent attention or a
// sliding window (the masks are not combined); Ok without a pattern. create_engine checks it
// too; the CLI calls it before anything starts.
Status check_block_sparse(const ModelConfig& model, std::string_view pattern);

// Builds an engine: checks the model is supported, loads weights (their matmul weights in the
// format config.quantization names, which replaces weights.quantization), sizes and allocates
// the KV pool. Errors: unsupported architecture, a quantization the backend does not run,
// weights that do not fit (with the numbers), bad config.
Result<std::unique_ptr<Engine>> create_engine(const ModelConfig& model,
                                              const WeightOptions& weights,
                                              const EngineConfig& config, Backend& backend);
// The same with weights already in backend memory (from load_weights, possibly modified: tests
// and differential checks between backends). The engine takes ownership of them.
Result<std::unique_ptr<Engine>> create_engine_with_weights(const ModelConfig& model,
                                                           ModelWeights weights,
                                                           const EngineConfig& config,
                                                           Backend& backend);

}  // namespace ib
