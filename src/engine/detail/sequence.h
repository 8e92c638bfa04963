// Internal to engine/: one request's state inside the engine. Its tokens are the prompt followed
// by the tokens generated so far; num_computed of them have their K/V in the cache (the rest are
// computed by the next scheduled steps). Preemption resets num_computed to 0 and frees the blocks;
// the tokens are kept, so the sequence recomputes them and continues where it stopped.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/engine.h"

namespace ib::detail {

// One image's visual-token embeddings (tokens, D) in act on the device: rows of the buffer its
// encoder batch wrote, which the batch's images share and the last of them frees.
struct ImageEmbeds {
  std::shared_ptr<const Buffer> storage;
  Tensor rows;
  bool empty() const { return storage == nullptr; }
};

struct Sequence {
  uint64_t id = 0;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int num_prompt_tokens = 0;
  int max_tokens = 0;
  SamplingParams sampling;
  std::vector<int32_t> stop_tokens;  // request's stop ids, plus EOS unless ignore_eos
  int num_computed = 0;              // tokens whose K/V is in the cache
  std::vector<int32_t> block_table;  // KV blocks, in position order
  // Sliding window on every layer (SchedulerConfig::sliding_window): the leading table entries
  // already returned to the pool, their blocks wholly behind every future query's window (the ids
  // stay as placeholders: the attention never reads before a query's window).
  int num_window_freed = 0;
  int num_preemptions = 0;
  // The next prompt position whose logits are delivered (prompt_logits_from, then past each
  // delivered row, so a recompute does not repeat them); -1: none.
  int prompt_logits_next = -1;
  FinishReason finish = FinishReason::kNone;
  int lora_slot = -1;  // the LoRA adapter's device slot; -1: the base model
  // Images (GenerationRequest::images, moved in by the engine) and, once the encoder has run on
  // them, their visual tokens' embeddings on the device, kept across preemption until the
  // sequence ends (a LLaVA-1.5-7B image's are 4.7 MB in bf16, 1.5 % of its prompt's KV).
  std::vector<ImageInput> images;
  std::vector<ImageEmbeds> image_embeds;  // per image; empty until encoded
  std::vector<int64_t> image_tokens;      // per image: its visual tokens
  int64_t encode_ns = 0;                  // wall time of the encoder batches it was in
  int64_t first_scheduled_ns = 0;  // start of the first step that computed part of it; 0: none
  // Multimodal-RoPE models: the prompt's 3-D positions (3, num_prompt_tokens) (empty:
  // sequential) and what later positions add to their index.
  std::vector<int32_t> mrope_positions;
  int mrope_delta = 0;

  Sequence(const GenerationRequest& request, const std::vector<int>& eos_token_ids);

  int num_tokens() const { return static_cast<int>(tokens.size()); }
  int num_output() const { return num_tokens() - num_prompt_tokens; }
  int num_uncomputed() const { return num_tokens() - num_computed; }
  // Appends a sampled token and sets finish when the request is complete.
  void append(int32_t token);
};

}  // namespace ib::detail
