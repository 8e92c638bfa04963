// The architecture seam: each model family has one file (engine/arch/<family>.cpp) that declares
// its weight schema (HF tensor names -> the engine's logical weights, with fused layouts, tying
// and biases) and its layer forward, composed from the backend's block ops. Adding a family is
// that file, one line in registry.cpp, and its tests.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"
#include "backend/communicator.h"
#include "engine/model_weights.h"
#include "model/config.h"

namespace ib {

// The engine's logical weights, in the layouts model_weights.h documents.
enum class WeightRole {
  kEmbed,
  kFinalNorm,
  kLmHead,
  kAttnNorm,
  kQkv,
  kQkvBias,
  kO,
  kFfnNorm,
  kPostAttnNorm,  // Gemma-2's sandwich norms: on the attention output before the residual add
  kPostFfnNorm,   // and on the MLP output before the residual add
  kGateUp,
  kDown,
  kRouter,        // MoE: (E, D)
  kExpertGateUp,  // MoE: one expert's (2F, D), rows gate (w1) then up (w3)
  kExpertDown,    // MoE: one expert's (D, F) (w2)
  // DeepSeek-V2 (multi-head latent attention; its query projection is kQkv, its o_proj kO):
  kQA,            // (Rq, D) q_a_proj (V2; V2-Lite has none)
  kQANorm,        // (Rq) q_a_layernorm
  kKvA,           // (R + P, D) kv_a_proj_with_mqa
  kKvANorm,       // (R) kv_a_layernorm
  kKvB,           // (H (N + V), R) kv_b_proj
  kSharedGateUp,  // (2 Fs, D) shared_experts gate_proj then up_proj
  kSharedDown     // (D, Fs) shared_experts down_proj
};
std::string_view weight_role_name(WeightRole role);  // e.g. "qkv"

// One checkpoint tensor that fills rows [row_offset, row_offset + shape[0]) of a logical weight
// (a vector's elements count as its rows). A fused checkpoint tensor is one source covering the
// whole weight; a split one is several sources stacked at their offsets.
struct TensorSource {
  std::string name;            // HF name, e.g. "model.layers.3.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // as the checkpoint must store it
  int64_t row_offset = 0;
};

struct SchemaEntry {
  WeightRole role = WeightRole::kEmbed;
  int layer = -1;  // -1: a whole-model weight
  std::vector<TensorSource> sources;
  int expert = -1;  // kExpertGateUp, kExpertDown: which expert
};

// Every tensor a checkpoint of the architecture must hold, where each one goes, and the names it
// may hold that the model does not read (lm_head.weight of a tied model, rotary buffers).
struct WeightSchema {
  std::string architecture;  // HF class, e.g. "Phi3ForCausalLM"
  std::vector<SchemaEntry> entries;
  std::vector<std::string> ignored_suffixes;

  bool ignores(std::string_view name) const;
  // What a checkpoint must hold, for errors: the whole-model names, then layer 0's without their
  // "model.layers.0." prefix ("model.embed_tokens.weight, ... and in each model.layers.N: ...").
  std::string expected_names() const;
};

// One step's activations (T tokens; D hidden, Q = heads * head_dim, KV = kv heads * head_dim,
// F intermediate), owned by the ModelRunner and sized at its limits.
struct StepBuffers {
  Tensor residual;  // (T, D) the residual stream; holds the embeddings on entry
  Tensor hidden;    // (T, D) normed input of the next matmul
  Tensor tmp;       // (T, D) o and down projection outputs
  Tensor qkv;       // (T, Q + 2 KV)
  Tensor attn;      // (T, Q)
  Tensor gate_up;   // (T, 2F)
  Tensor act;       // (T, F)
  // Mixture-of-experts models only (empty otherwise); k = experts per token, E experts.
  Tensor router_logits;   // f32 (T, E)
  Tensor expert_ids;      // int32 (L, T_max, k): each layer's own (layer_expert_ids)
  Tensor expert_weights;  // f32 (T, k)
};

// Layer `layer`'s routing, (T, k) int32, in StepBuffers::expert_ids: every MoE layer keeps its own
// ids (a dense layer's stay -1), so a step's routing can be read back after it
// (EngineConfig::capture_routing).
inline Tensor layer_expert_ids(const StepBuffers& b, size_t layer) {
  const int64_t t_max = b.expert_ids.dim(1), k = b.expert_ids.dim(2);
  return b.expert_ids.slice_rows(static_cast<int64_t>(layer), 1)
      .reshaped({t_max, k})
      .slice_rows(0, b.residual.rows());
}

// The LoRA slots' device stacks of one layer, per target (engine/lora.h LoraTarget order): A
// (S, R, in) and B (S, N, R), S = --max-loras slots of rank R = --max-lora-rank, zero-padded
// (LoraOps::lora_apply); a target no loaded adapter uses may still be allocated (all zeros).
// m: where the fused ops take them (FusedDecodeOps::fused_lora_lookahead), the lookahead
// matrices (S, R, K) of the targets after a norm (q/k/v, gate/up; FusedLora::next_m) over the
// input of the op before that norm (the previous layer's down: K = F; o: K = Q); empty otherwise
// (and for layer 0's q/k/v).
struct LoraLayerStacks {
  std::array<Tensor, 7> a;
  std::array<Tensor, 7> b;
  std::array<Tensor, 7> m;
};

// A tensor-parallel rank's collectives during one step (StepInputs::tp). The layer forward
// returns nothing, so the first failure is kept here for the runner to return after the step; it
// also aborts the group, so the other ranks stop waiting, and later collectives are skipped.
struct TensorParallelStep {
  Communicator* comm = nullptr;
  Status status;
  // Partial results (the embedding's lookups, o's and down's outputs) -> their sum over the ranks.
  void all_reduce_sum(Tensor inout) {
    if (status.ok()) keep(comm->all_reduce_sum(inout));
  }
  // The LM head's vocabulary slices -> the whole logits on every rank.
  void all_gather_columns(const Tensor& local, Tensor out) {
    if (status.ok()) keep(comm->all_gather_columns(local, out));
  }

 private:
  void keep(Status s) {
    status = std::move(s);
    if (!status.ok()) comm->abort(status.error().message);
  }
};

// One step's metadata (device views) and the model's per-layer KV cache.
struct StepInputs {
  Tensor positions;     // int32 (T)
  Tensor slot_mapping;  // int32 (T)
  Tensor inv_freq;      // f32 (head_dim / 2)
  // Multimodal-RoPE models only (ModelConfig::mrope_section; empty otherwise): each token's 3-D
  // position, int32 (3, T), and inv_freq masked to each section's pairs, f32 (3, head_dim / 2).
  // positions then holds row 0, which equals the others on decode steps.
  Tensor mrope_positions;
  Tensor mrope_inv_freq;
  const AttentionMetadata* attention = nullptr;
  const AttentionShape* shape = nullptr;
  std::span<const KvCacheLayer> kv;  // one per layer
  float rms_eps = 0;
  // Non-null on a decode step the backend fuses: the norms ride in the GEMVs, residual adds in
  // the GEMVs before them, RoPE and the KV write in the qkv GEMV, SwiGLU in the gate/up GEMV.
  FusedDecodeOps* fused = nullptr;
  // Whether the norm gains were folded into the dense matmuls after them
  // (ModelRunner::fold_norm_gains); quantized weights keep theirs, and the fused ops take them.
  bool gains_folded = true;
  // Multi-head latent attention models (DeepSeek-V2): the backend's MLA ops and the shape.
  MlaOps* mla = nullptr;
  const MlaShape* mla_shape = nullptr;
  // Mixture-of-experts models: the backend's MoE ops and the routing telemetry, int64
  // (layers, E), each layer's row counting the tokens routed to each expert (MoeOps::moe_route).
  MoeOps* moe = nullptr;
  Tensor expert_tokens;
  // The router's options beyond Mixtral's (DeepSeek-V2: norm_topk_prob, group_limited_greedy's
  // groups, routed_scaling_factor), from the config.
  MoeRouting moe_routing;
  // Steps where a token uses a LoRA adapter: the backend's LoRA ops, each token's slot (int32
  // (T), -1: none), the slots' scales (f32 (S)) and stacks (one per layer); lora null otherwise.
  LoraOps* lora = nullptr;
  Tensor lora_slot_ids;
  Tensor lora_scales;
  std::span<const LoraLayerStacks> lora_layers;
  // A rank of a tensor-parallel group (the weights its shard, the sizes its config's): the
  // architecture sums o's and down's outputs over the ranks before each residual add. Null at
  // TP = 1.
  TensorParallelStep* tp = nullptr;
};

class Architecture {
 public:
  virtual ~Architecture() = default;
  virtual std::string_view name() const = 0;  // the family, as ModelConfig::family
  virtual WeightSchema weight_schema(const ModelConfig& config) const = 0;
  // Runs every layer. On return the hidden state after the last layer is residual when
  // inputs.fused, else residual + tmp (the runner's final norm adds them on the sampled rows).
  virtual void forward_layers(Backend& backend, const ModelWeights& weights,
                              const StepInputs& inputs, const StepBuffers& buffers) const = 0;
  // Once, after the weights load and before anything reads them: a family whose checkpoints
  // store something other than what the ops take rewrites it here (Gemma's norms hold w of a
  // (1 + w) gain).
  virtual void prepare_weights(Backend& /*backend*/, ModelWeights& /*weights*/) const {}
  // Always-on experts after each MoE layer's routed ones (MoeRouting::always_on): DeepSeek's
  // shared experts where the backend runs them inside moe_experts (MoeOps::fuses_shared_experts).
  // The runner sizes the routing rows by it; prepare_weights builds LayerWeights::moe_gate_up.
  virtual int moe_always_on(const ModelConfig& /*config*/, Backend& /*backend*/) const { return 0; }
  // Whether decode steps may take the backend's fused ops (the dense SwiGLU decoder's).
  virtual bool runs_fused_decode() const { return true; }
  // Whether forward_layers runs a tensor-parallel rank (StepInputs::tp): the dense decoder's
  // families so far.
  virtual bool runs_tensor_parallel() const { return false; }
  // The width of StepBuffers::qkv per token: what the attention half of a layer keeps there
  // (Q + 2 KV for the dense decoder's fused qkv).
  virtual int64_t qkv_buffer_width(const ModelConfig& config) const {
    return (int64_t{config.num_heads} + 2 * int64_t{config.num_kv_heads}) * config.head_dim;
  }
  // Whether the backend runs what the architecture needs beyond the dense ops (checked before
  // any weight loads): a user error naming what is missing and the fix.
  virtual Status check_backend(const ModelConfig& /*config*/, Backend& /*backend*/) const {
    return Ok{};
  }
};

// The attention shape of config's layers: heads, head_dim, the softmax scale (1 / sqrt(head_dim),
// or query_pre_attn_scalar^-0.5 where the config has one), the sliding window (a family with
// alternating local and global layers sets it per layer) and the logit soft-cap.
AttentionShape attention_shape(const ModelConfig& config);
// The multi-head latent attention shape of an MLA config (DeepSeek-V2), as transformers'
// DeepseekV2Attention: softmax scale (qk_nope_head_dim + qk_rope_head_dim)^-0.5 times
// get_mscale(factor, mscale_all_dim)^2 under YaRN (mla_softmax_mscale), and rope_scale, the
// attention factor on cos and sin (rope_attention_factor).
MlaShape mla_shape(const ModelConfig& config);

// The architecture of config.family, or a user error naming the families the engine runs.
Result<const Architecture*> find_architecture(const ModelConfig& config);

// The logical weight a schema entry fills (its dense tensor: the loader reads dense checkpoints);
// expert: which expert, for kExpertGateUp and kExpertDown.
Tensor weight_for(ModelWeights& weights, WeightRole role, int layer, int expert = -1);

}  // namespace ib
