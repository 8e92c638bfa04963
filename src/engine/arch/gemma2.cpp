// Gemma-2 (9B, 27B): HF's split projections (q/k/v/o, gate/up/down) with Gemma's changes to the
// dense decoder, as Gemma2ForCausalLM computes them:
// - embeddings scaled by sqrt(hidden_size), the factor rounded to the activation dtype first;
// - RMSNorm gains (1 + w) from the stored w (prepare_weights adds the one);
// - sandwich norms: post_attention_layernorm on the attention output and post_feedforward_layernorm
//   on the MLP output, each before its residual add; pre_feedforward_layernorm before the MLP;
// - GeGLU with the tanh gelu (hidden_activation gelu_pytorch_tanh);
// - attention scaled by query_pre_attn_scalar^-0.5, scores soft-capped (attn_logit_softcapping);
//   even layers local (sliding window), odd layers global;
// - final logits soft-capped (final_logit_softcapping, ModelRunner::lm_head_rows).
// Tied embeddings. Runs unfused (the backend's fused decode ops are the SwiGLU decoder's), and
// tensor parallel (the sums before the post-norms).
#include <cmath>

#include "engine/arch/detail/dense_decoder.h"
#include "engine/arch/detail/families.h"

namespace ib::arch {
namespace {

float round_to_dtype(float x, DType dtype) {
  if (dtype == DType::kBF16) return round_to_bf16(x);
  if (dtype == DType::kF16) return f16_bits_to_f32(f32_to_f16_bits(x));
  return x;
}

class Gemma2 final : public Architecture {
 public:
  std::string_view name() const override { return "gemma2"; }

  WeightSchema weight_schema(const ModelConfig& c) const override {
    const DenseDims n = dense_dims(c);
    WeightSchema s;
    s.architecture = "Gemma2ForCausalLM";
    add_model_weights(c, s);
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string p = layer_prefix(l);
      const std::string m = p + "mlp.";
      const int64_t d = c.hidden_size;
      s.entries.push_back({WeightRole::kAttnNorm, l, {{p + "input_layernorm.weight", {d}}}});
      s.entries.push_back(
          {WeightRole::kPostAttnNorm, l, {{p + "post_attention_layernorm.weight", {d}}}});
      s.entries.push_back(
          {WeightRole::kFfnNorm, l, {{p + "pre_feedforward_layernorm.weight", {d}}}});
      s.entries.push_back(
          {WeightRole::kPostFfnNorm, l, {{p + "post_feedforward_layernorm.weight", {d}}}});
      add_split_attention(c, l, s);
      s.entries.push_back(
          {WeightRole::kGateUp,
           l,
           {{m + "gate_proj.weight", {n.f, n.d}, 0}, {m + "up_proj.weight", {n.f, n.d}, n.f}}});
      s.entries.push_back({WeightRole::kDown, l, {{m + "down_proj.weight", {n.d, n.f}, 0}}});
    }
    return s;
  }

  void prepare_weights(Backend& backend, ModelWeights& w) const override {
    backend.affine(w.final_norm, 1.0f, 1.0f);
    for (LayerWeights& l : w.layers) {
      for (Tensor* gain : {&l.attn_norm, &l.post_attn_norm, &l.ffn_norm, &l.post_ffn_norm}) {
        backend.affine(*gain, 1.0f, 1.0f);
      }
    }
  }

  bool runs_fused_decode() const override { return false; }
  // A rank sums o's output (attention_sublayer) and down's over the ranks before each post-norm.
  bool runs_tensor_parallel() const override { return true; }

  void forward_layers(Backend& backend, const ModelWeights& weights, const StepInputs& in,
                      const StepBuffers& b) const override {
    IB_ASSERT(in.fused == nullptr, "gemma2: runs unfused");
    const auto& layers = weights.layers;
    const float eps = in.rms_eps;
    // HF multiplies by the normaliser as a tensor of the activation dtype.
    const DType dt = backend.activation_dtype();
    const float normaliser = round_to_dtype(
        static_cast<float>(std::sqrt(static_cast<double>(b.residual.row_size()))), dt);
    backend.affine(b.residual, normaliser, 0.0f);
    backend.rms_norm(b.residual, layers[0].attn_norm, eps, b.hidden);
    AttentionShape local = *in.shape;  // even layers: the window; odd layers: global
    AttentionShape global = *in.shape;
    global.sliding_window = 0;
    for (size_t l = 0; l < layers.size(); ++l) {
      const LayerWeights& w = layers[l];
      StepInputs layer_in = in;
      layer_in.shape = l % 2 == 0 ? &local : &global;
      attention_sublayer(backend, w, in.kv[l], layer_in, b, l);
      // post_attention_layernorm, the residual add, pre_feedforward_layernorm (one op).
      backend.norm_add_rms_norm(b.residual, b.tmp, w.post_attn_norm, w.ffn_norm, eps, b.hidden);
      backend.matmul(b.hidden, w.w_gate_up, nullptr, b.gate_up);
      backend.gelu_tanh_mul(b.gate_up, b.act);
      backend.matmul(b.act, w.w_down, nullptr, b.tmp);
      if (in.tp != nullptr) in.tp->all_reduce_sum(b.tmp);  // each rank's columns' share of down
      if (l + 1 < layers.size()) {  // post_feedforward_layernorm, the add, the next input norm
        backend.norm_add_rms_norm(b.residual, b.tmp, w.post_ffn_norm, layers[l + 1].attn_norm, eps,
                                  b.hidden);
      } else {
        backend.rms_norm(b.tmp, w.post_ffn_norm, eps, b.tmp);
      }
    }
  }
};

}  // namespace

const Architecture& gemma2_architecture() {
  static const Gemma2 arch;
  return arch;
}

}  // namespace ib::arch
