// Phi-3 (mini, small, medium): the dense decoder with the fused projections transformers saves,
// self_attn.qkv_proj (rows q, k, v: the engine's qkv layout as is) and mlp.gate_up_proj (rows
// gate, then up, as Phi3MLP chunks them), so each loads as one tensor.
#include "engine/arch/detail/dense_decoder.h"
#include "engine/arch/detail/families.h"

namespace ib::arch {
namespace {

class Phi3 final : public Architecture {
 public:
  std::string_view name() const override { return "phi3"; }

  WeightSchema weight_schema(const ModelConfig& c) const override {
    const DenseDims n = dense_dims(c);
    WeightSchema s;
    s.architecture = "Phi3ForCausalLM";
    add_model_weights(c, s);
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string p = layer_prefix(l);
      add_layer_norms(c, l, s);
      s.entries.push_back(
          {WeightRole::kQkv, l, {{p + "self_attn.qkv_proj.weight", {n.q + 2 * n.kv, n.d}, 0}}});
      s.entries.push_back({WeightRole::kO, l, {{p + "self_attn.o_proj.weight", {n.d, n.q}, 0}}});
      s.entries.push_back(
          {WeightRole::kGateUp, l, {{p + "mlp.gate_up_proj.weight", {2 * n.f, n.d}, 0}}});
      s.entries.push_back({WeightRole::kDown, l, {{p + "mlp.down_proj.weight", {n.d, n.f}, 0}}});
    }
    return s;
  }

  void forward_layers(Backend& backend, const ModelWeights& weights, const StepInputs& inputs,
                      const StepBuffers& buffers) const override {
    dense_forward_layers(backend, weights, inputs, buffers);
  }

  bool runs_tensor_parallel() const override { return true; }
};

}  // namespace

const Architecture& phi3_architecture() {
  static const Phi3 arch;
  return arch;
}

}  // namespace ib::arch
