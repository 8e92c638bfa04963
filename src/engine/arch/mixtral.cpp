// Mixtral (8x7B, 8x22B): Mistral's attention (split q/k/v projections, GQA, RoPE) with a sparse
// mixture-of-experts MLP, HF's block_sparse_moe: the router gate (E, D) and experts J with w1
// (gate), w3 (up) and w2 (down), as MixtralSparseMoeBlock computes it (backend MoeOps: softmax in
// fp32, top-k, renormalised, weighted sum of w2(silu(w1 x) * w3 x)).
#include "engine/arch/detail/dense_decoder.h"
#include "engine/arch/detail/families.h"

namespace ib::arch {
namespace {

class Mixtral final : public Architecture {
 public:
  std::string_view name() const override { return "mixtral"; }
  // A rank routes every token (the router whole) and runs its columns of the chosen experts.
  bool runs_tensor_parallel() const override { return true; }

  WeightSchema weight_schema(const ModelConfig& c) const override {
    const DenseDims n = dense_dims(c);
    const int64_t f = c.moe.expert_intermediate_size;
    WeightSchema s;
    s.architecture = "MixtralForCausalLM";
    add_model_weights(c, s);
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string m = layer_prefix(l) + "block_sparse_moe.";
      add_layer_norms(c, l, s);
      add_split_attention(c, l, s);
      s.entries.push_back(
          {WeightRole::kRouter, l, {{m + "gate.weight", {c.moe.num_experts, n.d}, 0}}});
      for (int e = 0; e < c.moe.num_experts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        s.entries.push_back({WeightRole::kExpertGateUp,
                             l,
                             {{x + "w1.weight", {f, n.d}, 0}, {x + "w3.weight", {f, n.d}, f}},
                             e});
        s.entries.push_back({WeightRole::kExpertDown, l, {{x + "w2.weight", {n.d, f}, 0}}, e});
      }
    }
    return s;
  }

  void forward_layers(Backend& backend, const ModelWeights& weights, const StepInputs& in,
                      const StepBuffers& b) const override {
    IB_ASSERT(in.moe != nullptr, "mixtral: needs the backend's MoE ops");
    if (in.fused != nullptr) {
      forward_fused(backend, weights, in, b);
      return;
    }
    const auto& layers = weights.layers;
    const int64_t e = static_cast<int64_t>(layers[0].expert_gate_up.size());
    backend.rms_norm(b.residual, layers[0].attn_norm, in.rms_eps, b.hidden);
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerWeights& w = layers[l];
      attention_sublayer(backend, w, in.kv[l], in, b, l);
      backend.add_rms_norm(b.residual, b.tmp, w.ffn_norm, in.rms_eps, b.hidden);
      backend.matmul(b.hidden, w.router, nullptr, b.router_logits);
      const Tensor counts = in.expert_tokens.slice_rows(static_cast<int64_t>(l), 1).reshaped({e});
      const Tensor ids = layer_expert_ids(b, l);
      in.moe->moe_route(b.router_logits, /*renormalize=*/true, ids, b.expert_weights, counts);
      // IB_MOE_ADD_NORM (one rank: a rank's experts give part of each token's sum).
      if (l + 1 < layers.size() && in.tp == nullptr && in.moe->fuses_experts_add_norm()) {
        in.moe->moe_experts_add_rms_norm(b.hidden, ids, b.expert_weights, w.expert_gate_up,
                                         w.expert_down, b.residual, layers[l + 1].attn_norm,
                                         in.rms_eps, b.hidden);
        continue;
      }
      in.moe->moe_experts(b.hidden, ids, b.expert_weights, w.expert_gate_up, w.expert_down, b.tmp);
      // Each rank's columns of every expert: its share of each token's weighted sum.
      if (in.tp != nullptr) in.tp->all_reduce_sum(b.tmp);
      if (l + 1 < layers.size())
        backend.add_rms_norm(b.residual, b.tmp, layers[l + 1].attn_norm, in.rms_eps, b.hidden);
    }
  }

 private:
  // Decode steps on the backend's fused ops, which the runner offers a mixture-of-experts model
  // only where MoeOps::fuses_experts_add_norm (IB_MOE_ADD_NORM): the attention gains folded into
  // q/k/v (the MLP norm keeps its gain), RMSNorm + q/k/v + RoPE/cache in one op, o + the residual
  // add in one, and the experts' combine adding into the residual. The residual is whole at the
  // end (the runner's final norm reads it alone).
  static void forward_fused(Backend& backend, const ModelWeights& weights, const StepInputs& in,
                            const StepBuffers& b) {
    IB_ASSERT(in.gains_folded && in.lora == nullptr && in.moe->fuses_experts_add_norm(),
              "mixtral: fused decode steps need folded gains, no adapters and the experts' "
              "combine with the residual add");
    const auto& layers = weights.layers;
    const int64_t e = static_cast<int64_t>(layers[0].expert_gate_up.size());
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerWeights& w = layers[l];
      const Tensor* bqkv = w.bqkv.empty() ? nullptr : &w.bqkv;
      in.fused->rms_matmul_rope_cache(b.residual, nullptr, w.wqkv, bqkv, in.rms_eps, in.positions,
                                      in.slot_mapping, in.inv_freq, in.kv[l], *in.shape, b.qkv);
      backend.attention(b.qkv, in.kv[l], *in.attention, *in.shape, b.attn);
      add_row_parallel(
          in, b.residual, [&] { in.fused->matmul_add(b.attn, w.wo, b.residual); },
          [&] { backend.matmul(b.attn, w.wo, nullptr, b.residual); });
      backend.rms_norm(b.residual, w.ffn_norm, in.rms_eps, b.hidden);
      backend.matmul(b.hidden, w.router, nullptr, b.router_logits);
      const Tensor counts = in.expert_tokens.slice_rows(static_cast<int64_t>(l), 1).reshaped({e});
      const Tensor ids = layer_expert_ids(b, l);
      in.moe->moe_route(b.router_logits, /*renormalize=*/true, ids, b.expert_weights, counts);
      // residual += the experts; the norm it also writes (the next layer's gain, folded to ones,
      // or the final norm's) goes to b.hidden, unread: the next fused op normalises the residual.
      const Tensor& next_gain =
          l + 1 < layers.size() ? layers[l + 1].attn_norm : weights.final_norm;
      add_row_parallel(
          in, b.residual,
          [&] {
            in.moe->moe_experts_add_rms_norm(b.hidden, ids, b.expert_weights, w.expert_gate_up,
                                             w.expert_down, b.residual, next_gain, in.rms_eps,
                                             b.hidden);
          },
          [&] {
            in.moe->moe_experts(b.hidden, ids, b.expert_weights, w.expert_gate_up, w.expert_down,
                                b.residual);
          });
    }
  }
};

}  // namespace

const Architecture& mixtral_architecture() {
  static const Mixtral arch;
  return arch;
}

}  // namespace ib::arch
