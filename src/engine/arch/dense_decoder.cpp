// The pre-norm dense decoder's block helpers (see detail/dense_decoder.h): per layer
// [qkv matmul (+bias) (+ LoRA), rope_and_cache, attention, o matmul, add_rms_norm, gate_up matmul,
// silu_mul, down matmul, add_rms_norm of the next layer], or five fused ops on decode steps; a
// tensor-parallel rank sums o's and down's outputs over the ranks before each add (fused: the
// residual after it, add_row_parallel).
#include "engine/arch/detail/dense_decoder.h"

#include <array>
#include <optional>
#include <span>

#include "engine/lora.h"

namespace ib::arch {

DenseDims dense_dims(const ModelConfig& c) {
  DenseDims dims;
  dims.d = c.hidden_size;
  dims.q = int64_t{c.num_heads} * c.head_dim;
  dims.kv = int64_t{c.num_kv_heads} * c.head_dim;
  dims.f = c.intermediate_size;
  dims.v = c.vocab_size;
  return dims;
}

std::string layer_prefix(int layer) {
  return "model.layers." + std::to_string(layer) + ".";
}

void add_model_weights(const ModelConfig& c, WeightSchema& schema) {
  const DenseDims n = dense_dims(c);
  schema.entries.push_back({WeightRole::kEmbed, -1, {{"model.embed_tokens.weight", {n.v, n.d}}}});
  schema.entries.push_back({WeightRole::kFinalNorm, -1, {{"model.norm.weight", {n.d}}}});
  if (c.tie_word_embeddings) {
    schema.ignored_suffixes.emplace_back("lm_head.weight");
  } else {
    schema.entries.push_back({WeightRole::kLmHead, -1, {{"lm_head.weight", {n.v, n.d}}}});
  }
  schema.ignored_suffixes.emplace_back("rotary_emb.inv_freq");  // older exports saved the buffer
}

void add_layer_norms(const ModelConfig& c, int layer, WeightSchema& schema) {
  const std::string p = layer_prefix(layer);
  const int64_t d = c.hidden_size;
  schema.entries.push_back({WeightRole::kAttnNorm, layer, {{p + "input_layernorm.weight", {d}}}});
  schema.entries.push_back(
      {WeightRole::kFfnNorm, layer, {{p + "post_attention_layernorm.weight", {d}}}});
}

void add_split_attention(const ModelConfig& c, int layer, WeightSchema& schema) {
  const DenseDims n = dense_dims(c);
  const std::string p = layer_prefix(layer) + "self_attn.";
  schema.entries.push_back({WeightRole::kQkv,
                            layer,
                            {{p + "q_proj.weight", {n.q, n.d}, 0},
                             {p + "k_proj.weight", {n.kv, n.d}, n.q},
                             {p + "v_proj.weight", {n.kv, n.d}, n.q + n.kv}}});
  if (c.attention_bias) {
    schema.entries.push_back({WeightRole::kQkvBias,
                              layer,
                              {{p + "q_proj.bias", {n.q}, 0},
                               {p + "k_proj.bias", {n.kv}, n.q},
                               {p + "v_proj.bias", {n.kv}, n.q + n.kv}}});
  }
  schema.entries.push_back({WeightRole::kO, layer, {{p + "o_proj.weight", {n.d, n.q}, 0}}});
}

namespace {

// The LoRA targets [first, last] (engine/lora.h LoraTarget order) of a layer as one group (they
// share x and out), each at its row offset in the fused output: after those before it.
struct LoraGroup {
  std::array<LoraTargetStacks, LoraOps::kMaxLoraGroup> targets;
  size_t count = 0;
  std::span<const LoraTargetStacks> span() const { return {targets.data(), count}; }
};

LoraGroup lora_group(const StepInputs& in, size_t layer, LoraTarget first, LoraTarget last) {
  const LoraLayerStacks& stacks = in.lora_layers[layer];
  LoraGroup group;
  int64_t offset = 0;
  for (int t = static_cast<int>(first); t <= static_cast<int>(last); ++t, ++group.count) {
    const auto i = static_cast<size_t>(t);
    group.targets.at(group.count) = LoraTargetStacks{stacks.a[i], stacks.b[i], offset};
    offset += stacks.b[i].dim(1);
  }
  return group;
}

// The LoRA updates of layer's targets [first, last] from x into their row ranges of out, when
// the step has adapters (in.lora): one grouped op.
void lora_updates(const StepInputs& in, size_t layer, LoraTarget first, LoraTarget last,
                  const Tensor& x, Tensor out) {
  if (in.lora == nullptr) return;
  const LoraGroup group = lora_group(in, layer, first, last);
  in.lora->lora_apply_group(x, in.lora_slot_ids, group.span(), in.lora_scales, out);
}

// A layer's LoRA targets [first, last].
struct LoraTargets {
  size_t layer;
  LoraTarget first, last;
};

// The same updates as a fused decode op's argument (get(): null when the step has no adapters),
// with the targets of the fused op that reads this op's output next where there is one (next:
// its shrink may ride in this op, FusedLora::next). Not copyable: lora's spans point into the
// groups.
class FusedLoraArg {
 public:
  FusedLoraArg(const StepInputs& in, LoraTargets t, std::optional<LoraTargets> next = {}) {
    if (in.lora == nullptr) return;
    group_ = lora_group(in, t.layer, t.first, t.last);
    lora_ = FusedLora{in.lora_slot_ids, in.lora_scales, group_.span(), {}, {}};
    if (next) {
      next_ = lora_group(in, next->layer, next->first, next->last);
      lora_.next = next_.span();
      // The next targets' lookahead matrices over this op's input, where the runner made them.
      const LoraLayerStacks& stacks = in.lora_layers[next->layer];
      size_t count = 0;
      for (int i = static_cast<int>(next->first); i <= static_cast<int>(next->last); ++i) {
        const Tensor& m = stacks.m[static_cast<size_t>(i)];
        if (m.empty()) break;
        next_m_.at(count++) = m;
      }
      if (count == next_.count) lora_.next_m = std::span<const Tensor>(next_m_.data(), count);
    }
  }
  FusedLoraArg(const FusedLoraArg&) = delete;
  FusedLoraArg& operator=(const FusedLoraArg&) = delete;
  const FusedLora* get() const { return group_.count > 0 ? &lora_ : nullptr; }

 private:
  LoraGroup group_, next_;
  std::array<Tensor, LoraOps::kMaxLoraGroup> next_m_;
  FusedLora lora_;
};

}  // namespace

void attention_sublayer(Backend& backend, const LayerWeights& w, const KvCacheLayer& kv,
                        const StepInputs& in, const StepBuffers& b, size_t layer) {
  const Tensor* bqkv = w.bqkv.empty() ? nullptr : &w.bqkv;
  backend.matmul(b.hidden, w.wqkv, bqkv, b.qkv);
  lora_updates(in, layer, LoraTarget::kQ, LoraTarget::kV, b.hidden, b.qkv);
  if (in.mrope_positions.empty()) {
    backend.rope_and_cache(b.qkv, in.positions, in.slot_mapping, in.inv_freq, kv, *in.shape);
  } else {
    // M-RoPE: one pass per section, each rotating its pairs by its own position row (the other
    // pairs' angles are 0, an exact identity); the last pass writes the final keys to the cache.
    const int64_t t = in.mrope_positions.dim(1);
    for (int64_t k = 0; k < 3; ++k) {
      backend.rope_and_cache(
          b.qkv, in.mrope_positions.slice_rows(k, 1).reshaped({t}), in.slot_mapping,
          in.mrope_inv_freq.slice_rows(k, 1).reshaped({in.mrope_inv_freq.dim(1)}), kv, *in.shape);
    }
  }
  backend.attention(b.qkv, kv, *in.attention, *in.shape, b.attn);
  backend.matmul(b.attn, w.wo, nullptr, b.tmp);
  lora_updates(in, layer, LoraTarget::kO, LoraTarget::kO, b.attn, b.tmp);
  if (in.tp != nullptr) in.tp->all_reduce_sum(b.tmp);  // each rank's heads' share of o
}

void dense_forward_layers(Backend& backend, const ModelWeights& weights, const StepInputs& in,
                          const StepBuffers& b) {
  const auto& layers = weights.layers;
  const AttentionShape& shape = *in.shape;
  if (!in.fused) backend.rms_norm(b.residual, layers[0].attn_norm, in.rms_eps, b.hidden);
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerWeights& w = layers[l];
    const Tensor* bqkv = w.bqkv.empty() ? nullptr : &w.bqkv;
    const KvCacheLayer& kv = in.kv[l];
    if (in.fused) {
      // LoRA (in.lora): each update rides in its op (where w has its gain folded in, so has A).
      const Tensor* attn_gain = in.gains_folded ? nullptr : &w.attn_norm;
      const Tensor* ffn_gain = in.gains_folded ? nullptr : &w.ffn_norm;
      // Each op names the targets of the op that reads its output next (o -> gate/up -> down ->
      // the next layer's q/k/v), whose A must then carry the folded gain of its norm.
      const LoraTargets qkv_t{l, LoraTarget::kQ, LoraTarget::kV};
      const LoraTargets gate_up_t{l, LoraTarget::kGate, LoraTarget::kUp};
      const LoraTargets down_t{l, LoraTarget::kDown, LoraTarget::kDown};
      // Under tensor parallelism the residual o and down add into is whole only after the sum
      // over the ranks, so no op's shrink may ride in the op before it.
      std::optional<LoraTargets> after_o, after_down;
      if (in.gains_folded && in.tp == nullptr) after_o = gate_up_t;
      if (in.gains_folded && in.tp == nullptr && l + 1 < layers.size()) {
        after_down = LoraTargets{l + 1, LoraTarget::kQ, LoraTarget::kV};
      }
      const FusedLoraArg qkv_lora(in, qkv_t);
      in.fused->rms_matmul_rope_cache(b.residual, attn_gain, w.wqkv, bqkv, in.rms_eps, in.positions,
                                      in.slot_mapping, in.inv_freq, kv, shape, b.qkv,
                                      qkv_lora.get());
      const FusedLoraArg o_lora(in, {l, LoraTarget::kO, LoraTarget::kO}, after_o);
      in.fused->lora_before_attention(b.attn, b.residual, o_lora.get());
      backend.attention(b.qkv, kv, *in.attention, shape, b.attn);
      add_row_parallel(
          in, b.residual, [&] { in.fused->matmul_add(b.attn, w.wo, b.residual, o_lora.get()); },
          [&] {
            backend.matmul(b.attn, w.wo, nullptr, b.residual);
            lora_updates(in, l, LoraTarget::kO, LoraTarget::kO, b.attn, b.residual);
          });
      const FusedLoraArg gate_up_lora(in, gate_up_t, down_t);
      in.fused->rms_matmul_swiglu(b.residual, ffn_gain, w.w_gate_up, in.rms_eps, b.act,
                                  gate_up_lora.get());
      const FusedLoraArg down_lora(in, down_t, after_down);
      add_row_parallel(
          in, b.residual,
          [&] { in.fused->matmul_add(b.act, w.w_down, b.residual, down_lora.get()); },
          [&] {
            backend.matmul(b.act, w.w_down, nullptr, b.residual);
            lora_updates(in, l, LoraTarget::kDown, LoraTarget::kDown, b.act, b.residual);
          });
      continue;
    }
    attention_sublayer(backend, w, kv, in, b, l);
    backend.add_rms_norm(b.residual, b.tmp, w.ffn_norm, in.rms_eps, b.hidden);
    backend.matmul(b.hidden, w.w_gate_up, nullptr, b.gate_up);
    lora_updates(in, l, LoraTarget::kGate, LoraTarget::kUp, b.hidden, b.gate_up);
    backend.silu_mul(b.gate_up, b.act);
    backend.matmul(b.act, w.w_down, nullptr, b.tmp);
    lora_updates(in, l, LoraTarget::kDown, LoraTarget::kDown, b.act, b.tmp);
    if (in.tp != nullptr) in.tp->all_reduce_sum(b.tmp);  // each rank's columns' share of down
    if (l + 1 < layers.size())
      backend.add_rms_norm(b.residual, b.tmp, layers[l + 1].attn_norm, in.rms_eps, b.hidden);
  }
}

}  // namespace ib::arch
