// rope_inv_freq: HF transformers' _compute_default_rope_parameters, _compute_llama3_parameters,
// _compute_yarn_parameters and linear scaling, evaluated in fp32 in the same order as torch does.
#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/model_weights.h"

namespace ib {
namespace {

// The rotated dimensions: head_dim, or qk_rope_head_dim under multi-head latent attention
// (DeepseekV2Config sets head_dim to it for the rotary embedding).
int rope_dim(const ModelConfig& config) {
  return config.mla.kv_lora_rank > 0 ? config.mla.qk_rope_head_dim : config.head_dim;
}

std::vector<float> default_inv_freq(const ModelConfig& config) {
  const int dim = rope_dim(config);
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

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// transformers' _compute_yarn_parameters: the frequencies interpolated (divided by factor) below
// the correction range, extrapolated (kept) above it, blended by a linear ramp inside it.
std::vector<float> yarn_inv_freq(const ModelConfig& config) {
  const RopeScaling& s = config.rope_scaling;
  const int dim = rope_dim(config);
  const double base = config.rope_theta;
  const double original = s.original_max_position_embeddings;
  auto correction_dim = [&](double rotations) {
    return (dim * std::log(original / (rotations * 2 * std::numbers::pi))) / (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast);
  double high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // linear_ramp_factor's guard against a zero span
  const auto low_f = static_cast<float>(low);
  const auto span_f = static_cast<float>(high - low);
  const auto factor = static_cast<float>(s.factor);
  const std::vector<float> extrapolation = default_inv_freq(config);
  std::vector<float> inv_freq;
  for (size_t i = 0; i < extrapolation.size(); ++i) {
    // pos_freqs = base ** (i / dim); 1 / (factor * pos_freqs); 1 / pos_freqs.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(dim);
    const float pos_freq = std::pow(static_cast<float>(base), exponent);
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((static_cast<float>(i) - low_f) / span_f, 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv_freq.push_back(interpolation * (1.0f - extrapolation_factor) +
                       extrapolation[i] * extrapolation_factor);
  }
  return inv_freq;
}

}  // namespace

float rope_attention_factor(const ModelConfig& config) {
  const RopeScaling& s = config.rope_scaling;
  if (s.type != "yarn") return 1.0f;
  if (s.attention_factor > 0) return static_cast<float>(s.attention_factor);
  if (s.mscale != 0 && s.mscale_all_dim != 0) {
    return static_cast<float>(yarn_mscale(s.factor, s.mscale) /
                              yarn_mscale(s.factor, s.mscale_all_dim));
  }
  return static_cast<float>(yarn_mscale(s.factor, 1.0));
}

double mla_softmax_mscale(const ModelConfig& config) {
  const RopeScaling& s = config.rope_scaling;
  if (s.type == "none" || s.mscale_all_dim == 0) return 1.0;
  const double m = yarn_mscale(s.factor, s.mscale_all_dim);
  return m * m;
}

std::vector<float> rope_inv_freq(const ModelConfig& config) {
  std::vector<float> inv_freq = default_inv_freq(config);
  const RopeScaling& s = config.rope_scaling;
  if (s.type == "llama3") {
    apply_llama3_scaling(s, inv_freq);
  } else if (s.type == "yarn") {
    inv_freq = yarn_inv_freq(config);
  } else if (s.type == "linear") {
    for (float& f : inv_freq) f = f / static_cast<float>(s.factor);
  } else {
    IB_ASSERT(s.type == "none", "rope_inv_freq: unsupported rope scaling reached the engine");
  }
  return inv_freq;
}

}  // namespace ib
