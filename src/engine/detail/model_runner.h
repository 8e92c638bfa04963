// Internal to engine/: the forward pass of a model over Backend ops, for one scheduled batch; its
// layers are the architecture's (engine/arch). Activation buffers are allocated once, at the
// engine's limits (tag kActivations), so that every step reuses the same memory; the per-step
// metadata (token ids, positions, slots, block tables, sampling parameters) goes to the device in
// one copy.
//
// Decode graphs (backends with supports_graphs()): after the KV cache is attached, one graph per
// padded batch-size bucket (1, 2, 4, 8, 16, 24, ... up to the cap) records embedding -> sampling
// of a decode-only step. The metadata of a bucket has a fixed layout (B rows, block tables
// ceil(graph_max_context / block_size) wide); rows beyond the real batch are padding: slot -1
// (no cache write), context 0 (attention writes nothing), greedy sampling, results ignored.
// A greedy decode-only batch whose contexts fit replays the smallest bucket that holds it; any
// other batch runs op by op ("eager").
#pragma once

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/arch/architecture.h"
#include "engine/detail/kv_cache.h"
#include "engine/engine.h"

namespace ib::detail {

// Rows of a share whose input embeddings are given (a vision encoder's outputs) instead of
// looked up: rows [offset, offset + rows) of the share take data (rows, D) in act on the device.
struct InputEmbeds {
  int offset = 0;
  int rows = 0;
  Tensor data;
};

// One sequence's share of a step: num_tokens tokens at positions start_pos, start_pos + 1, ...
struct RunnerSeq {
  const int32_t* tokens = nullptr;
  int num_tokens = 0;
  int start_pos = 0;                                  // = tokens already in the cache
  const std::vector<int32_t>* block_table = nullptr;  // covers start_pos + num_tokens tokens
  bool sample = false;                                // sample after the last token
  SamplingParams sampling;
  int sample_step = 0;  // output index of the sampled token (the sampler's counter)
  // Also return the logits after tokens [logits_offset, logits_offset + logits_rows) of this
  // share (prompt logits); such a batch runs eager.
  int logits_offset = 0;
  int logits_rows = 0;
  int lora_slot = -1;  // LoRA adapter slot of every token of this share; -1: the base model
  std::vector<InputEmbeds> input_embeds;  // such a batch runs eager
  // Multimodal-RoPE models: the prompt's 3-D positions (3, P) (GenerationRequest::
  // mrope_positions; empty: sequential) and what the positions after the prompt add to their
  // index (max + 1 - P).
  std::span<const int32_t> mrope_positions;
  int mrope_delta = 0;
};

struct RunnerLimits {
  int max_num_batched_tokens = 0;  // T: tokens per step
  int max_num_seqs = 0;            // S: sequences per step
  int max_model_len = 0;           // bounds the block table width
  int block_size = 16;
  int lora_slots = 0;             // S: LoRA adapter slots (0: LoRA off)
  int lora_rank = 0;              // R: their width
  BlockSparse block_sparse = {};  // --block-sparse-attention: every layer's pattern (off: dense)
};

struct RunnerOutput {
  std::vector<int32_t> tokens;             // one per sampling sequence, in batch order
  std::vector<std::vector<float>> logits;  // same rows, only when capture_logits
  // Same rows, only when capture_routing on a mixture-of-experts model: each layer's k expert ids
  // (L x k, layer-major, the router's order; -1 on a dense layer).
  std::vector<std::vector<int32_t>> routing;
  // Per batch entry: (logits_rows, V) f32, empty where it asked for none.
  std::vector<std::vector<float>> prompt_logits;
  std::optional<int64_t> device_ns;  // device time of the forward pass, when measurable
  bool graph = false;                // replayed a decode graph
  int64_t launched_ns = 0;           // host clock once the device work was enqueued
  int64_t synced_ns = 0;             // host clock once the results were on the host
};

// Bytes a step must move through device memory at least: every weight it streams (all layers,
// lm_head and the final norm when a row samples, the embedding rows of its tokens), the K/V it
// reads (each sequence's visible context) and the K/V it writes (one row per token).
struct StepTraffic {
  int64_t weight_bytes = 0;
  int64_t kv_read_bytes = 0;
  int64_t kv_write_bytes = 0;
  int64_t total() const { return weight_bytes + kv_read_bytes + kv_write_bytes; }
};

struct GraphOptions {
  int max_batch = 256;     // largest bucket (capped by the engine's limits)
  int max_context = 8192;  // contexts above this run eager (capped by max_model_len)
};

class ModelRunner {
 public:
  // Allocates the activation and metadata buffers; the KV cache comes later (attach_kv_cache),
  // sized from the memory left after these.
  // A rank of a tensor-parallel group (comm: its communicator, size > 1): model is the rank's
  // config (model/tensor_parallel.h rank_config) and weights its shard (shard_weights), whose
  // embedding and lm_head hold its rows of the vocabulary; the steps run unfused, and each sums
  // the embeddings' lookups and o's and down's outputs and gathers the logits over the ranks.
  // Every rank executes the same batches.
  static Result<std::unique_ptr<ModelRunner>> create(const ModelConfig& model, ModelWeights weights,
                                                     const RunnerLimits& limits, Backend& backend,
                                                     Communicator* comm = nullptr);
  // Whether the backend runs LoRA adapters on this model (LoraOps, a dense model): a user error
  // naming the fix otherwise; checked before any weight is loaded.
  static Status check_lora_runs(const ModelConfig& model, Backend& backend);
  void attach_kv_cache(KvCache kv) { kv_ = std::move(kv); }
  KvCache& kv_cache() { return kv_; }  // on-demand growth reallocates it (no graphs then)
  // Captures the decode graphs (after attach_kv_cache); max_model_len is the resolved limit.
  Status capture_decode_graphs(const GraphOptions& options, int max_model_len);

  Result<RunnerOutput> execute(std::span<const RunnerSeq> batch, bool capture_logits,
                               bool capture_routing = false);
  StepTraffic traffic(std::span<const RunnerSeq> batch) const;

  const ModelWeights& weights() const { return weights_; }
  // Whether decode steps of few enough tokens take the backend's fused ops.
  bool fuses_decode() const { return fused_ops_ != nullptr; }
  ModelWeights& mutable_weights() { return weights_; }  // calibration sets activation scales
  int64_t activation_bytes() const;
  // Routing telemetry of a mixture-of-experts model: the tokens routed to each expert of each
  // layer since the runner was created, (layers, E) row-major; empty for a dense model. Reads
  // the backend's counters (a device-to-host copy).
  std::vector<int64_t> expert_tokens() const;
  // Writes adapter into LoRA slot (zero-padded to the slots' rank; targets it lacks zeroed), or
  // clears the slot (adapter null). Requires LoRA slots (RunnerLimits::lora_slots).
  void set_lora_slot(int slot, const LoraAdapter* adapter);
  int64_t lora_bytes() const { return static_cast<int64_t>(lora_buf_.bytes()); }
  int num_graphs() const { return static_cast<int>(graphs_.size()); }
  int64_t graph_bytes() const;
  std::vector<int> graph_buckets() const;

 private:
  ModelRunner(const ModelConfig& model, const Architecture& arch, ModelWeights weights,
              const RunnerLimits& limits, Backend& backend);
  Status allocate();
  Status allocate_moe();   // the MoE buffers below
  Status allocate_lora();  // the LoRA stacks below
  // The lookahead matrices (LoraLayerStacks::m) where the fused ops take them, and one slot's.
  Status allocate_lora_lookahead();
  void set_lora_lookahead(int slot, float scale);
  // When the backend has fused decode ops for the model (fused_decode_fits) and every matmul
  // weight is dense.
  void fold_norm_gains();
  // Fills the host staging words and uploads them; sets the views below. Returns rows to sample.
  // pad_to > 0: the fixed layout of decode bucket pad_to (padding rows, graph_width_ wide tables).
  int upload_metadata(std::span<const RunnerSeq> batch, int pad_to = 0);
  // The row of weights_.embed that token looks up (embed_rows_ says how).
  int32_t embedding_row(int32_t token) const {
    if (embed_rows_ == 0) return token;
    const int64_t local = token - embed_first_row_;
    return static_cast<int32_t>(local >= 0 && local < embed_rows_ ? local : embed_rows_);
  }
  // batch: its input_embeds replace the looked-up embeddings (empty for graph capture).
  void forward(int num_tokens, int num_rows, std::span<const RunnerSeq> batch = {});
  // The bucket that replays this batch, or 0 when it must run eager.
  int graph_bucket_for(std::span<const RunnerSeq> batch) const;
  Result<RunnerOutput> read_results(int rows, bool capture_logits);
  // The final norm and lm_head on rows of the last layer's state: the residual (R', D), plus the
  // last sublayer's output (R', D) where the step did not fuse it into the residual (null).
  void lm_head_rows(Tensor residual_rows, const Tensor* sublayer_rows, Tensor norm_rows,
                    Tensor logits);
  // After an eager forward: the logits of each entry's logits_rows into out.prompt_logits,
  // computed and copied R rows at a time through the sampled rows' buffers.
  Status read_prompt_logits(std::span<const RunnerSeq> batch, RunnerOutput& out);
  // out.routing: every sampled row's expert ids per layer (their token is the entry's last).
  Status read_routing(std::span<const RunnerSeq> batch, RunnerOutput& out);

  ModelConfig model_;
  const Architecture& arch_;
  ModelWeights weights_;
  RunnerLimits limits_;
  Backend& backend_;
  KvCache kv_;
  AttentionShape attn_shape_;
  MlaShape mla_shape_;  // multi-head latent attention models only
  // Per-token widths of the qkv, attn and gate_up (2 x ffn) buffers: the dense decoder's Q + 2 KV,
  // Q and F, or what the architecture keeps there (MLA: the query, the latent, V heads).
  int64_t qkv_width_ = 0, attn_width_ = 0, ffn_width_ = 0;

  // Activations, allocated at T rows (R = min(S, T) rows for the sampled ones).
  Buffer residual_buf_, hidden_buf_, tmp_buf_, qkv_buf_, attn_buf_, gate_up_buf_, act_buf_;
  Buffer rows_buf_, logits_buf_, inv_freq_buf_, meta_buf_;
  // Tensor parallelism (comm_ non-null): this rank's logits f32 (R, V / N) before the gather, and
  // the step's collectives (their first failure).
  Communicator* comm_ = nullptr;
  Buffer rank_logits_buf_;
  TensorParallelStep tp_step_;
  // The rank's tokens of the embedding: [embed_first_row_, + embed_rows_) at its rows 0 ..
  // embed_rows_ - 1, every other token at its zero row embed_rows_ (the lookups summed over the
  // ranks then give each token's row). embed_rows_ 0: the whole table (TP = 1).
  int64_t embed_first_row_ = 0, embed_rows_ = 0;
  Tensor inv_freq_;        // f32 (head_dim / 2)
  Tensor mrope_inv_freq_;  // f32 (3, head_dim / 2): multimodal-RoPE models only
  // Mixture-of-experts models: router logits f32 (T, E), expert ids int32 (layers, T, k), weights
  // f32 (T, k) and the routing counters int64 (layers, E), in one buffer; empty otherwise.
  Buffer moe_buf_;
  Tensor router_logits_, expert_ids_, expert_weights_, expert_tokens_;
  int moe_always_on_ = 0;  // Architecture::moe_always_on: columns after the top-k
  // The counters as the last step left them, and per layer the experts whose count that step
  // raised: the experts it read (traffic()); empty until a step has run, or when the counters
  // went down (reset) and the step's reads are unknown.
  std::vector<int64_t> counters_seen_;
  std::vector<int64_t> experts_read_;
  void note_experts_read();
  // LoRA (RunnerLimits::lora_slots > 0): per layer and target the slots' A and B stacks, and the
  // slots' scales f32 (S), in one buffer; this step's slot ids (int32 (T), in meta_buf_), and
  // whether any token of it uses an adapter.
  Buffer lora_buf_;
  Buffer lora_m_buf_;  // the lookahead matrices (empty: none)
  std::vector<LoraLayerStacks> lora_layers_;
  // Per layer the norm gains before q/k/v and gate/up as loaded (act (D) each, in lora_buf_),
  // for the adapters' A when fold_norm_gains folded the weights' (empty without LoRA slots).
  std::vector<std::array<Tensor, 2>> lora_gains_;
  Tensor lora_scales_, lora_slot_ids_;
  bool step_uses_lora_ = false;
  // Whether every token of the step has its three M-RoPE positions equal (always, without
  // M-RoPE): the fused decode ops rotate by `positions` alone, so a step holding image tokens
  // runs unfused.
  bool step_mrope_flat_ = true;

  // Step metadata: host staging (4-byte words) and the views of this step into meta_buf_.
  std::vector<int32_t> staging_;
  int out_tokens_offset_ = 0;  // words; fixed, after the largest layout

  // Decode graphs by bucket size; graph_width_ block-table entries per row in their layout.
  std::map<int, std::unique_ptr<DeviceGraph>> graphs_;
  int graph_max_context_ = 0;
  int graph_width_ = 0;
  int64_t layer_weight_bytes_ = 0;  // all layers' tensors
  // The backend's fused decode ops when they fit the model; null: every step runs the unfused
  // ops. gains_folded_: the norm gains were folded into wqkv / w_gate_up (ones left), which
  // happens only with dense weights; quantized ones keep their gains (StepInputs::gains_folded).
  FusedDecodeOps* fused_ops_ = nullptr;
  bool gains_folded_ = false;
  Tensor token_ids_, positions_, slot_mapping_, sample_rows_, out_tokens_;
  Tensor mrope_positions_;  // int32 (3, T): multimodal-RoPE models only
  AttentionMetadata attn_meta_;
  SamplingMetadata sampling_meta_;
};

}  // namespace ib::detail
