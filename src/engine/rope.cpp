// rope_inv_freq: HF transformers' _compute_default_rope_parameters, _compute_llama3_parameters
// and linear scaling, evaluated in fp32 in the same order as torch does.
#include <cmath>
#include <numbers>

#include "engine/model_weights.h"

namespace ib {
namespace {

std::vector<float> default_inv_freq(const ModelConfig& config) {
  const int dim = config.head_dim;
  const auto base = static_cast<float>(config.rope_theta);
  std::vector<float> inv_freq;
  for (int i = 0; i < dim; i += 2) {
    // arange(0, dim, 2).float() / dim, then base ** that, then 1.0 / that.
    const float exponent = static_cast<float>(i) / static_cast<float>(dim);
    inv_freq.push_back(1.0f / std::pow(base, exponent));
  }
  return inv_freq;
}

void apply_llama3_scaling(const RopeScaling& s, std::vector<float>& inv_freq) {
  const auto factor = static_cast<float>(s.factor);
  const auto low_freq_factor = static_cast<float>(s.low_freq_factor);
  const auto old_context_len = static_cast<double>(s.original_max_position_embeddings);
  // Python floats, rounded to fp32 when they meet a float32 tensor.
  const auto low_freq_wavelen = static_cast<float>(old_context_len / s.low_freq_factor);
  const auto high_freq_wavelen = static_cast<float>(old_context_len / s.high_freq_factor);
  const auto two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const auto factor_span = static_cast<float>(s.high_freq_factor - s.low_freq_factor);
  for (float& f : inv_freq) {
    const float wavelen = two_pi / f;
    const float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const float smooth =
        (static_cast<float>(old_context_len) / wavelen - low_freq_factor) / factor_span;
    const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    f = medium ? smoothed : scaled;
  }
}

}  // namespace

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  std::vector<float> inv_freq = default_inv_freq(config);
  const RopeScaling& s = config.rope_scaling;
  if (s.type == "llama3") {
    apply_llama3_scaling(s, inv_freq);
  } else if (s.type == "linear") {
    for (float& f : inv_freq) f = f / static_cast<float>(s.factor);
  } else {
    IB_ASSERT(s.type == "none", "rope_inv_freq: unsupported rope scaling reached the engine");
  }
  return inv_freq;
}

}  // namespace ib
