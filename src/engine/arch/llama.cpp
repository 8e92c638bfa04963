// Llama (2, 3, 3.1, 3.2), Mistral and Qwen2: the dense decoder with HF's split projections
// (q_proj, k_proj, v_proj stacked into qkv; gate_proj, up_proj into gate_up) and, for Qwen2,
// q/k/v biases (ModelConfig::attention_bias).
#include "engine/arch/detail/dense_decoder.h"
#include "engine/arch/detail/families.h"

namespace ib::arch {
namespace {

class SplitProjectionDecoder final : public Architecture {
 public:
  SplitProjectionDecoder(std::string_view family, std::string_view hf_class)
      : family_(family), hf_class_(hf_class) {}

  std::string_view name() const override { return family_; }

  WeightSchema weight_schema(const ModelConfig& c) const override {
    const DenseDims n = dense_dims(c);
    WeightSchema s;
    s.architecture = std::string(hf_class_);
    add_model_weights(c, s);
    for (int l = 0; l < c.num_layers; ++l) {
      const std::string m = layer_prefix(l) + "mlp.";
      add_layer_norms(c, l, s);
      add_split_attention(c, l, s);
      s.entries.push_back(
          {WeightRole::kGateUp,
           l,
           {{m + "gate_proj.weight", {n.f, n.d}, 0}, {m + "up_proj.weight", {n.f, n.d}, n.f}}});
      s.entries.push_back({WeightRole::kDown, l, {{m + "down_proj.weight", {n.d, n.f}, 0}}});
    }
    return s;
  }

  void forward_layers(Backend& backend, const ModelWeights& weights, const StepInputs& inputs,
                      const StepBuffers& buffers) const override {
    dense_forward_layers(backend, weights, inputs, buffers);
  }

  bool runs_tensor_parallel() const override { return true; }

 private:
  std::string_view family_;
  std::string_view hf_class_;
};

}  // namespace

const Architecture& llama_architecture() {
  static const SplitProjectionDecoder arch("llama", "LlamaForCausalLM");
  return arch;
}
const Architecture& mistral_architecture() {
  static const SplitProjectionDecoder arch("mistral", "MistralForCausalLM");
  return arch;
}
const Architecture& qwen2_architecture() {
  static const SplitProjectionDecoder arch("qwen2", "Qwen2ForCausalLM");
  return arch;
}

}  // namespace ib::arch
