// Test support (engine tests only): a published-format quantized checkpoint written from the
// formats' definitions (FP8: scale = max |w| / 448, codes = e4m3(w / scale); INT8: scale =
// max |w| / 127, codes = rne(w / scale)), independently of the engine's quantizer.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "model/safetensors.h"

namespace ib::testing {

struct CodesTensor {
  std::string codes;          // E4M3 or int8 bytes, row-major
  std::vector<float> scales;  // one (per tensor) or one per row
};

inline CodesTensor quantize_reference(const std::vector<float>& w, int64_t rows, bool per_channel,
                                      bool int8) {
  CodesTensor t;
  const int64_t groups = per_channel ? rows : 1;
  const int64_t per = static_cast<int64_t>(w.size()) / groups;
  for (int64_t g = 0; g < groups; ++g) {
    double amax = 0;
    for (int64_t i = 0; i < per; ++i)
      amax = std::max(amax, std::fabs(double{w[static_cast<size_t>(g * per + i)]}));
    const float scale = amax == 0 ? 1.0f : static_cast<float>(amax / (int8 ? 127.0 : 448.0));
    t.scales.push_back(scale);
    for (int64_t i = 0; i < per; ++i) {
      const float v = w[static_cast<size_t>(g * per + i)] / scale;
      t.codes.push_back(int8 ? static_cast<char>(std::clamp(std::nearbyint(v), -127.0f, 127.0f))
                             : static_cast<char>(f32_to_f8e4m3_bits(v)));
    }
  }
  return t;
}

// The bf16 checkpoint of hf_tensors with every *_proj.weight as F8_E4M3 (or I8) plus its
// weight_scale.
inline std::vector<SafetensorsWriteTensor> quantized_checkpoint(
    std::vector<SafetensorsWriteTensor> dense, bool per_channel, std::vector<CodesTensor>* written,
    bool int8 = false) {
  std::vector<SafetensorsWriteTensor> out;
  for (SafetensorsWriteTensor& t : dense) {
    const bool matmul = t.name.size() > 12 && t.name.ends_with("_proj.weight");
    if (!matmul) {
      out.push_back(std::move(t));
      continue;
    }
    // The fp32 values: the bf16 bytes decoded.
    std::vector<float> v(t.bytes.size() / 2);
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t b;
      std::memcpy(&b, t.bytes.data() + 2 * i, 2);
      v[i] = bf16_bits_to_f32(b);
    }
    const int64_t rows = t.shape[0];
    CodesTensor q = quantize_reference(v, rows, per_channel, int8);
    std::string scale_bytes(q.scales.size() * 4, '\0');
    std::memcpy(scale_bytes.data(), q.scales.data(), scale_bytes.size());
    out.push_back({t.name, int8 ? DType::kI8 : DType::kF8E4M3, t.shape, q.codes});
    out.push_back({t.name + "_scale", DType::kF32,
                   per_channel ? std::vector<int64_t>{rows, 1} : std::vector<int64_t>{1},
                   scale_bytes});
    if (written) written->push_back(std::move(q));
  }
  return out;
}

}  // namespace ib::testing
