// --merge-lora: an adapter folded into the dense matmul weights, W += scale * B A, computed on
// the host in fp32 from the weights as stored and written back once (rounded to their dtype).
#include <cstring>

#include "engine/lora.h"

namespace ib {
namespace {

std::vector<float> weight_to_f32(Backend& backend, const Tensor& t) {
  const auto n = static_cast<size_t>(t.numel());
  std::vector<float> out(n);
  if (t.dtype == DType::kF32) {
    backend.copy_to_host(t, out.data());
    return out;
  }
  std::vector<uint16_t> raw(n);
  backend.copy_to_host(t, raw.data());
  for (size_t i = 0; i < n; ++i) {
    out[i] = t.dtype == DType::kBF16 ? bf16_bits_to_f32(raw[i]) : f16_bits_to_f32(raw[i]);
  }
  return out;
}

WeightRef& target_weight(LayerWeights& l, LoraTarget target) {
  switch (target) {
    case LoraTarget::kQ:
    case LoraTarget::kK:
    case LoraTarget::kV:
      return l.wqkv;
    case LoraTarget::kO:
      return l.wo;
    case LoraTarget::kGate:
    case LoraTarget::kUp:
      return l.w_gate_up;
    case LoraTarget::kDown:
      return l.w_down;
  }
  return l.wo;
}

}  // namespace

Status merge_lora(const ModelConfig& config, const LoraAdapter& adapter, ModelWeights& weights,
                  Backend& backend) {
  if (config.moe.num_experts > 0) {
    return user_error("--merge-lora: LoRA on mixture-of-experts models is not supported");
  }
  const int64_t r = adapter.rank;
  for (size_t l = 0; l < weights.layers.size() && l < adapter.layers.size(); ++l) {
    LayerWeights& layer = weights.layers[l];
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraMatrices& m = adapter.layers[l][static_cast<size_t>(t)];
      if (m.empty()) continue;
      const auto target = static_cast<LoraTarget>(t);
      WeightRef& w = target_weight(layer, target);
      if (w.format != WeightFormat::kDense) {
        return user_error("--merge-lora folds an adapter into dense weights only, and these are " +
                          std::string(weight_format_name(w.format)) +
                          "; serve the adapter unmerged (--enable-lora --lora-modules) or drop "
                          "--quantization");
      }
      const LoraTargetShape s = lora_target_shape(config, target);
      std::vector<float> dense = weight_to_f32(backend, w.data);  // (rows, K)
      const int64_t k = w.cols();
      IB_ASSERT(k == s.in, "merge_lora: the adapter was checked against another shape");
      for (int64_t n = 0; n < s.out; ++n) {
        float* row = dense.data() + (s.row_offset + n) * k;
        for (int64_t c = 0; c < k; ++c) {
          float delta = 0.0f;
          for (int64_t j = 0; j < r; ++j) {
            delta += m.b[static_cast<size_t>(n * r + j)] * m.a[static_cast<size_t>(j * k + c)];
          }
          row[c] += adapter.scale * delta;
        }
      }
      backend.copy_from_host(w.data, dense.data(), DType::kF32);
    }
  }
  weights.description += ", LoRA merged: " + adapter.path;
  return Ok{};
}

}  // namespace ib
