// Internal to engine/: the forward pass of a Llama-family model over Backend ops, for one
// scheduled batch. Activation buffers are allocated once, at the engine's limits (tag
// kActivations), so that every step reuses the same memory; the per-step metadata (token ids,
// positions, slots, block tables, sampling parameters) goes to the device in one copy.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "engine/detail/kv_cache.h"
#include "engine/engine.h"

namespace ib::detail {

// One sequence's share of a step: num_tokens tokens at positions start_pos, start_pos + 1, ...
struct RunnerSeq {
  const int32_t* tokens = nullptr;
  int num_tokens = 0;
  int start_pos = 0;                                  // = tokens already in the cache
  const std::vector<int32_t>* block_table = nullptr;  // covers start_pos + num_tokens tokens
  bool sample = false;                                // sample after the last token
  SamplingParams sampling;
  int sample_step = 0;  // output index of the sampled token (the sampler's counter)
};

struct RunnerLimits {
  int max_num_batched_tokens = 0;  // T: tokens per step
  int max_num_seqs = 0;            // S: sequences per step
  int max_model_len = 0;           // bounds the block table width
  int block_size = 16;
};

struct RunnerOutput {
  std::vector<int32_t> tokens;             // one per sampling sequence, in batch order
  std::vector<std::vector<float>> logits;  // same rows, only when capture_logits
};

class ModelRunner {
 public:
  // Allocates the activation and metadata buffers; the KV cache comes later (attach_kv_cache),
  // sized from the memory left after these.
  static Result<std::unique_ptr<ModelRunner>> create(const ModelConfig& model, ModelWeights weights,
                                                     const RunnerLimits& limits, Backend& backend);
  void attach_kv_cache(KvCache kv) { kv_ = std::move(kv); }

  Result<RunnerOutput> execute(std::span<const RunnerSeq> batch, bool capture_logits);

  const ModelWeights& weights() const { return weights_; }
  int64_t activation_bytes() const;

 private:
  ModelRunner(const ModelConfig& model, ModelWeights weights, const RunnerLimits& limits,
              Backend& backend);
  Status allocate();
  // Fills the host staging words and uploads them; sets the views below. Returns rows to sample.
  int upload_metadata(std::span<const RunnerSeq> batch);
  void forward(int num_tokens, int num_rows);

  ModelConfig model_;
  ModelWeights weights_;
  RunnerLimits limits_;
  Backend& backend_;
  KvCache kv_;
  AttentionShape attn_shape_;

  // Activations, allocated at T rows (R = min(S, T) rows for the sampled ones).
  Buffer residual_buf_, hidden_buf_, tmp_buf_, qkv_buf_, attn_buf_, gate_up_buf_, act_buf_;
  Buffer rows_buf_, logits_buf_, inv_freq_buf_, meta_buf_;
  Tensor inv_freq_;  // f32 (head_dim / 2)

  // Step metadata: host staging (4-byte words) and the views of this step into meta_buf_.
  std::vector<int32_t> staging_;
  Tensor token_ids_, positions_, slot_mapping_, sample_rows_, out_tokens_;
  AttentionMetadata attn_meta_;
  SamplingMetadata sampling_meta_;
};

}  // namespace ib::detail
