// --merge-lora: an adapter folded into the dense matmul weights, W += scale * B A, computed on
// the host in fp32 from the weights as stored and written back once (rounded to their dtype).
#include <algorithm>
#include <cstring>
#include <vector>

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
      // delta[c] = sum over j (ascending) of B[n][j] A[j][c] in fp32, then one add per element;
      // the loop over c innermost walks A's rows contiguously (an 8B model's adapter in
      // seconds, not minutes).
      std::vector<float> delta(static_cast<size_t>(k));
      for (int64_t n = 0; n < s.out; ++n) {
        float* row = dense.data() + (s.row_offset + n) * k;
        std::fill(delta.begin(), delta.end(), 0.0f);
        for (int64_t j = 0; j < r; ++j) {
          const float bj = m.b[static_cast<size_t>(n * r + j)];
          const float* aj = m.a.data() + j * k;
          for (int64_t c = 0; c < k; ++c) delta[static_cast<size_t>(c)] += bj * aj[c];
        }
        for (int64_t c = 0; c < k; ++c) row[c] += adapter.scale * delta[static_cast<size_t>(c)];
      }
      backend.copy_from_host(w.data, dense.data(), DType::kF32);
    }
  }
  weights.description += ", LoRA merged: " + adapter.path;
  return Ok{};
}

}  // namespace ib
