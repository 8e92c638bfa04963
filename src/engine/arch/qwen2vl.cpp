// Qwen2-VL's language model (Qwen2VLForConditionalGeneration): Qwen2's dense decoder, its tensors
// under Qwen2's names (engine/detail/language_model_view.h maps the checkpoint's), with
// multimodal RoPE: the runner hands each token's 3-D position (StepInputs::mrope_positions) and
// the dense attention rotates each mrope_section by its own row. The vision tower is src/vision's.
#include "engine/arch/detail/dense_decoder.h"
#include "engine/arch/detail/families.h"

namespace ib::arch {
namespace {

class Qwen2VlDecoder final : public Architecture {
 public:
  std::string_view name() const override { return "qwen2_vl"; }
  // The dense decoder's sums; the runner hands every rank the image embeddings (through rank 0).
  bool runs_tensor_parallel() const override { return true; }

  WeightSchema weight_schema(const ModelConfig& c) const override {
    WeightSchema s = qwen2_architecture().weight_schema(c);
    s.architecture = "Qwen2VLForConditionalGeneration";
    return s;
  }

  void forward_layers(Backend& backend, const ModelWeights& weights, const StepInputs& inputs,
                      const StepBuffers& buffers) const override {
    IB_ASSERT(!inputs.mrope_positions.empty(), "qwen2_vl: a step without M-RoPE positions");
    dense_forward_layers(backend, weights, inputs, buffers);
  }
};

}  // namespace

const Architecture& qwen2vl_architecture() {
  static const Qwen2VlDecoder arch;
  return arch;
}

}  // namespace ib::arch
