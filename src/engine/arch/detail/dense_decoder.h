// Internal to engine/arch: the pre-norm dense decoder that Llama, Mistral, Qwen2 and Phi-3 share
// (RMSNorm, GQA attention with RoPE, SwiGLU MLP), as block helpers each family composes: the
// whole-model part of the schema, the per-layer forward, and the fused decode variant.
#pragma once

#include <string>

#include "engine/arch/architecture.h"

namespace ib::arch {

// Q = heads * head_dim, KV = kv heads * head_dim, D hidden, F intermediate, V vocabulary.
struct DenseDims {
  int64_t d = 0, q = 0, kv = 0, f = 0, v = 0;
};
DenseDims dense_dims(const ModelConfig& config);

// "model.layers.<layer>."
std::string layer_prefix(int layer);

// Embedding, final norm and (untied) lm_head under HF's names; a tied model may still carry
// lm_head.weight, which is ignored (as transformers ties it to the embedding).
void add_model_weights(const ModelConfig& config, WeightSchema& schema);
// The two RMSNorm gains of a layer (input_layernorm, post_attention_layernorm).
void add_layer_norms(const ModelConfig& config, int layer, WeightSchema& schema);

// HF's split attention projections (self_attn.q_proj, k_proj, v_proj stacked into qkv, with
// their biases when attention_bias; o_proj), as Llama, Mistral, Qwen2 and Mixtral save them.
void add_split_attention(const ModelConfig& config, int layer, WeightSchema& schema);

// The unfused attention half of a layer: b.hidden (normed) -> qkv (+ bias) -> rope and the KV
// write -> attention -> o projection into b.tmp; with the LoRA updates of q, k, v and o when the
// step has adapters (in.lora; layer indexes in.lora_layers).
void attention_sublayer(Backend& backend, const LayerWeights& w, const KvCacheLayer& kv,
                        const StepInputs& in, const StepBuffers& b, size_t layer);

// A fused op `add` that adds a row-parallel linear's output (o, down, the experts' combine) into
// the residual. Under tensor parallelism a rank's output is only its share of the sum, so rank 0
// adds its share and every other rank writes its own over the residual (`set`: the same product
// without the add), and the residual is summed over the ranks after it: the old residual plus
// every rank's share, once, on every rank. One rank: just `add`.
template <typename AddOp, typename SetOp>
void add_row_parallel(const StepInputs& in, const Tensor& residual, AddOp add, SetOp set) {
  if (in.tp != nullptr && in.tp->comm->rank() != 0) {
    set();
  } else {
    add();
  }
  if (in.tp != nullptr) in.tp->all_reduce_sum(residual);
}

// Every layer of the dense decoder, unfused (prefill, mixed steps) or fused (decode).
void dense_forward_layers(Backend& backend, const ModelWeights& weights, const StepInputs& in,
                          const StepBuffers& b);

}  // namespace ib::arch
