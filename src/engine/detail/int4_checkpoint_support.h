// Test support (engine tests only): 4-bit checkpoints in the published layouts, written from each
// format's public description independently of the engine's unpackers (engine/int4_layouts.h):
// - AutoAWQ GEMM: qweight int32 (K, N / 8), nibble i of word c holding column 8c + order[i] with
//   order = 0, 2, 4, 6, 1, 3, 5, 7; qzeros (K / G, N / 8) the same; scales f16 (K / G, N).
// - GPTQ: qweight int32 (K / 8, N), nibble i of row r holding input feature 8r + i; qzeros
//   (K / G, N / 8), nibble j holding column 8c + j, minus 1 in checkpoint_format "gptq";
//   scales f16 (K / G, N); g_idx int32 (K).
// - compressed-tensors pack-quantized: weight_packed int32 (N, K / 8), nibble i = feature 8c + i,
//   signed q + 8; weight_scale (N, K / G); weight_zero_point int32 (N / 8, K / G) packed along
//   N; weight_shape int64 [N, K].
// - bitsandbytes NF4 with double quantization: weight u8 (N K / 2, 1), element 2j high nibble;
//   absmax u8 codes into a 256-entry nested_quant_map times nested_absmax per 256 blocks plus
//   nested_offset; quant_map; quant_state JSON bytes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "backend/weight.h"
#include "core/dtype.h"
#include "model/config.h"
#include "model/safetensors.h"

namespace ib::testing {

// One (N, K) source quantized by the writer: its codes in input-feature order and, per group,
// the scale (f16 bits) and zero point; values() is what the format says it stands for.
struct Int4Source {
  int64_t n = 0, k = 0, g = 0;
  bool nf4 = false;
  std::vector<uint8_t> q;      // (N, K)
  std::vector<uint16_t> s;     // int4: (N, K / G) f16 bits
  std::vector<float> absmax;   // nf4: (N, K / G), as the double quantization stores it
  std::vector<uint8_t> z;      // int4: (N, K / G)
  std::vector<int32_t> g_idx;  // (K): the group of each input feature
  float value(int64_t r, int64_t i) const {
    const size_t gi = static_cast<size_t>(r * (k / g) + g_idx[static_cast<size_t>(i)]);
    const int code = q[static_cast<size_t>(r * k + i)];
    if (nf4) return kNf4Levels[code] * absmax[gi];
    return static_cast<float>(code - int{z[gi]}) * f16_bits_to_f32(s[gi]);
  }
  std::vector<float> values() const {
    std::vector<float> v(static_cast<size_t>(n * k));
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 0; i < k; ++i) v[static_cast<size_t>(r * k + i)] = value(r, i);
    return v;
  }
};

// Min-max RTN per group (the members of group j: the features with g_idx == j): zero points from
// the minimum, or symmetric with z = 8 and s = max |w| / 7.
inline Int4Source quantize_int4_source(const std::vector<float>& w, int64_t n, int64_t k, int64_t g,
                                       bool zero_points, std::vector<int32_t> g_idx) {
  Int4Source t{n,  k,  g,  false,           std::vector<uint8_t>(static_cast<size_t>(n * k)),
               {}, {}, {}, std::move(g_idx)};
  t.s.resize(static_cast<size_t>(n * (k / g)));
  t.z.resize(t.s.size());
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t j = 0; j < k / g; ++j) {
      float lo = 0.0f, hi = 0.0f;
      for (int64_t i = 0; i < k; ++i) {
        if (t.g_idx[static_cast<size_t>(i)] != j) continue;
        lo = std::min(lo, w[static_cast<size_t>(r * k + i)]);
        hi = std::max(hi, w[static_cast<size_t>(r * k + i)]);
      }
      const float s = zero_points ? std::max(hi - lo, 1e-4f) / 15.0f
                                  : std::max(std::max(hi, -lo), 1e-4f) / 7.0f;
      const size_t gi = static_cast<size_t>(r * (k / g) + j);
      t.s[gi] = f32_to_f16_bits(s);
      const float sr = f16_bits_to_f32(t.s[gi]);
      t.z[gi] = zero_points ? static_cast<uint8_t>(std::clamp(std::round(-lo / sr), 0.0f, 15.0f))
                            : uint8_t{8};
      for (int64_t i = 0; i < k; ++i) {
        if (t.g_idx[static_cast<size_t>(i)] != j) continue;
        const float v = std::round(w[static_cast<size_t>(r * k + i)] / sr) + t.z[gi];
        t.q[static_cast<size_t>(r * k + i)] = static_cast<uint8_t>(std::clamp(v, 0.0f, 15.0f));
      }
    }
  }
  return t;
}

inline std::vector<int32_t> plain_g_idx(int64_t k, int64_t g) {
  std::vector<int32_t> v(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) v[static_cast<size_t>(i)] = static_cast<int32_t>(i / g);
  return v;
}

// GPTQ's act-order: the features in a shuffled order, taken G at a time into groups.
inline std::vector<int32_t> shuffled_g_idx(int64_t k, int64_t g, uint64_t seed) {
  std::vector<int32_t> order(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i) order[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  for (int64_t i = k - 1; i > 0; --i) {  // Fisher-Yates with a fixed LCG
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>((seed >> 33) % (i + 1))]);
  }
  std::vector<int32_t> g_idx(static_cast<size_t>(k));
  for (int64_t i = 0; i < k; ++i)
    g_idx[static_cast<size_t>(order[static_cast<size_t>(i)])] = static_cast<int32_t>(i / g);
  return g_idx;
}

template <typename T>
std::string raw_bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Eight 4-bit values into one int32, value i at bits 4i.
inline int32_t pack8(const uint8_t (&v)[8]) {
  uint32_t word = 0;
  for (int i = 0; i < 8; ++i) word |= uint32_t{v[i] & 0xFu} << (4 * i);
  return static_cast<int32_t>(word);
}

inline std::vector<SafetensorsWriteTensor> awq_tensors(const std::string& p, const Int4Source& t) {
  static constexpr int kOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
  const int64_t n = t.n, k = t.k, groups = k / t.g;
  std::vector<int32_t> qweight(static_cast<size_t>(k * n / 8)),
      qzeros(static_cast<size_t>(groups * n / 8));
  std::vector<uint16_t> scales(static_cast<size_t>(groups * n));
  for (int64_t c = 0; c < n / 8; ++c) {
    for (int64_t i = 0; i < k; ++i) {
      uint8_t v[8];
      for (int j = 0; j < 8; ++j) v[j] = t.q[static_cast<size_t>((8 * c + kOrder[j]) * k + i)];
      qweight[static_cast<size_t>(i * (n / 8) + c)] = pack8(v);
    }
    for (int64_t gi = 0; gi < groups; ++gi) {
      uint8_t v[8];
      for (int j = 0; j < 8; ++j)
        v[j] = t.z[static_cast<size_t>((8 * c + kOrder[j]) * groups + gi)];
      qzeros[static_cast<size_t>(gi * (n / 8) + c)] = pack8(v);
    }
  }
  for (int64_t r = 0; r < n; ++r)
    for (int64_t gi = 0; gi < groups; ++gi)
      scales[static_cast<size_t>(gi * n + r)] = t.s[static_cast<size_t>(r * groups + gi)];
  return {{p + ".qweight", DType::kI32, {k, n / 8}, raw_bytes(qweight)},
          {p + ".qzeros", DType::kI32, {groups, n / 8}, raw_bytes(qzeros)},
          {p + ".scales", DType::kF16, {groups, n}, raw_bytes(scales)}};
}

inline std::vector<SafetensorsWriteTensor> gptq_tensors(const std::string& p, const Int4Source& t,
                                                        bool v1) {
  const int64_t n = t.n, k = t.k, groups = k / t.g;
  std::vector<int32_t> qweight(static_cast<size_t>(k / 8 * n)),
      qzeros(static_cast<size_t>(groups * n / 8));
  std::vector<uint16_t> scales(static_cast<size_t>(groups * n));
  for (int64_t row = 0; row < k / 8; ++row) {
    for (int64_t r = 0; r < n; ++r) {
      uint8_t v[8];
      for (int i = 0; i < 8; ++i) v[i] = t.q[static_cast<size_t>(r * k + 8 * row + i)];
      qweight[static_cast<size_t>(row * n + r)] = pack8(v);
    }
  }
  for (int64_t gi = 0; gi < groups; ++gi) {
    for (int64_t c = 0; c < n / 8; ++c) {
      uint8_t v[8];
      for (int j = 0; j < 8; ++j)
        v[j] = static_cast<uint8_t>(t.z[static_cast<size_t>((8 * c + j) * groups + gi)] -
                                    (v1 ? 1 : 0));
      qzeros[static_cast<size_t>(gi * (n / 8) + c)] = pack8(v);
    }
    for (int64_t r = 0; r < n; ++r)
      scales[static_cast<size_t>(gi * n + r)] = t.s[static_cast<size_t>(r * groups + gi)];
  }
  return {{p + ".qweight", DType::kI32, {k / 8, n}, raw_bytes(qweight)},
          {p + ".qzeros", DType::kI32, {groups, n / 8}, raw_bytes(qzeros)},
          {p + ".scales", DType::kF16, {groups, n}, raw_bytes(scales)},
          {p + ".g_idx", DType::kI32, {k}, raw_bytes(t.g_idx)}};
}

inline std::vector<SafetensorsWriteTensor> compressed_tensors(const std::string& p,
                                                              const Int4Source& t,
                                                              bool zero_points) {
  const int64_t n = t.n, k = t.k, groups = k / t.g;
  std::vector<int32_t> packed(static_cast<size_t>(n * k / 8)),
      zp(static_cast<size_t>(n / 8 * groups));
  std::vector<float> scales(static_cast<size_t>(n * groups));  // f32, the f16 values widened
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < k / 8; ++c) {
      uint8_t v[8];
      for (int i = 0; i < 8; ++i) v[i] = t.q[static_cast<size_t>(r * k + 8 * c + i)];
      packed[static_cast<size_t>(r * (k / 8) + c)] = pack8(v);
    }
    for (int64_t gi = 0; gi < groups; ++gi)
      scales[static_cast<size_t>(r * groups + gi)] =
          f16_bits_to_f32(t.s[static_cast<size_t>(r * groups + gi)]);
  }
  for (int64_t row = 0; row < n / 8; ++row) {
    for (int64_t gi = 0; gi < groups; ++gi) {
      uint8_t v[8];
      for (int j = 0; j < 8; ++j) v[j] = t.z[static_cast<size_t>((8 * row + j) * groups + gi)];
      zp[static_cast<size_t>(row * groups + gi)] = pack8(v);
    }
  }
  const std::vector<int64_t> shape = {n, k};
  std::vector<SafetensorsWriteTensor> out = {
      {p + ".weight_packed", DType::kI32, {n, k / 8}, raw_bytes(packed)},
      {p + ".weight_scale", DType::kF32, {n, groups}, raw_bytes(scales)},
      {p + ".weight_shape", DType::kI64, {2}, raw_bytes(shape)}};
  if (zero_points)
    out.push_back({p + ".weight_zero_point", DType::kI32, {n / 8, groups}, raw_bytes(zp)});
  return out;
}

// NF4 with double quantization: the codes of w / absmax (nearest level), the absmax of each
// block quantized around their mean to a linear 256-entry map per 256 blocks.
inline Int4Source quantize_nf4_source(const std::vector<float>& w, int64_t n, int64_t k) {
  Int4Source t;
  t.n = n, t.k = k, t.g = 64, t.nf4 = true;
  t.g_idx = plain_g_idx(k, 64);
  const int64_t blocks = n * k / 64;
  std::vector<float> amax(static_cast<size_t>(blocks));
  t.q.resize(static_cast<size_t>(n * k));
  for (int64_t b = 0; b < blocks; ++b) {
    float m = 0.0f;
    for (int64_t i = 0; i < 64; ++i) m = std::max(m, std::fabs(w[static_cast<size_t>(b * 64 + i)]));
    amax[static_cast<size_t>(b)] = m == 0.0f ? 1.0f : m;
    for (int64_t i = 0; i < 64; ++i) {
      const float x = w[static_cast<size_t>(b * 64 + i)] / amax[static_cast<size_t>(b)];
      int best = 0;
      for (int c = 1; c < 16; ++c)
        if (std::fabs(x - kNf4Levels[c]) < std::fabs(x - kNf4Levels[best])) best = c;
      t.q[static_cast<size_t>(b * 64 + i)] = static_cast<uint8_t>(best);
    }
  }
  t.absmax = amax;  // replaced by the double-quantized values in nf4_tensors
  return t;
}

// Writes t's NF4 tensors and sets t.absmax to the values the double quantization keeps.
inline std::vector<SafetensorsWriteTensor> nf4_tensors(const std::string& w, Int4Source& t) {
  const int64_t blocks = t.n * t.k / 64, nested = (blocks + 255) / 256;
  double sum = 0;
  for (float a : t.absmax) sum += a;
  const float offset = static_cast<float>(sum / static_cast<double>(blocks));
  std::vector<float> code2(256), absmax2(static_cast<size_t>(nested), 0.0f), levels(16);
  for (int j = 0; j < 256; ++j)
    code2[static_cast<size_t>(j)] = -1.0f + 2.0f * static_cast<float>(j) / 255.0f;
  for (int j = 0; j < 16; ++j) levels[static_cast<size_t>(j)] = kNf4Levels[j];
  for (int64_t b = 0; b < blocks; ++b) {
    float& m = absmax2[static_cast<size_t>(b / 256)];
    m = std::max(m, std::fabs(t.absmax[static_cast<size_t>(b)] - offset));
  }
  std::vector<uint8_t> qabs(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    const float m2 = absmax2[static_cast<size_t>(b / 256)];
    const float x = m2 == 0.0f ? 0.0f : (t.absmax[static_cast<size_t>(b)] - offset) / m2;
    const int j = static_cast<int>(std::clamp(std::round((x + 1.0f) * 127.5f), 0.0f, 255.0f));
    qabs[static_cast<size_t>(b)] = static_cast<uint8_t>(j);
    t.absmax[static_cast<size_t>(b)] = code2[static_cast<size_t>(j)] * m2 + offset;
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(t.n * t.k / 2));
  for (size_t i = 0; i < bytes.size(); ++i)
    bytes[i] = static_cast<uint8_t>((t.q[2 * i] << 4) | t.q[2 * i + 1]);
  char offset_text[64];
  std::snprintf(offset_text, sizeof(offset_text), "%.9g", static_cast<double>(offset));
  const std::string state =
      "{\"quant_type\": \"nf4\", \"blocksize\": 64, \"dtype\": \"bfloat16\", "
      "\"shape\": [" +
      std::to_string(t.n) + ", " + std::to_string(t.k) +
      "], \"nested_blocksize\": 256, \"nested_dtype\": \"float32\", "
      "\"nested_offset\": " +
      offset_text + "}";
  return {{w, DType::kU8, {t.n * t.k / 2, 1}, raw_bytes(bytes)},
          {w + ".absmax", DType::kU8, {blocks}, raw_bytes(qabs)},
          {w + ".nested_absmax", DType::kF32, {nested}, raw_bytes(absmax2)},
          {w + ".nested_quant_map", DType::kF32, {256}, raw_bytes(code2)},
          {w + ".quant_map", DType::kF32, {16}, raw_bytes(levels)},
          {w + ".quant_state.bitsandbytes__nf4",
           DType::kU8,
           {static_cast<int64_t>(state.size())},
           state}};
}

// An f32 tensor's values.
inline std::vector<float> floats_of(const SafetensorsWriteTensor& t) {
  std::vector<float> v(t.bytes.size() / 4);
  std::memcpy(v.data(), t.bytes.data(), t.bytes.size());
  return v;
}

// The fp32 checkpoint's tensors with each *_proj.weight replaced by layout's packed tensors;
// values[name] gets what the format says each stores. Sources sharing an input (q/k/v,
// gate/up) share one act-order g_idx, as GPTQ gives them.
inline std::vector<SafetensorsWriteTensor> pack_int4_checkpoint(
    const std::vector<SafetensorsWriteTensor>& dense, const CheckpointQuantization& q,
    std::map<std::string, std::vector<float>>& values) {
  std::vector<SafetensorsWriteTensor> out;
  for (const SafetensorsWriteTensor& t : dense) {
    // The linear layers (Mixtral's experts' w1 / w2 / w3 too); not a router's gate.weight.
    const bool expert = t.name.find(".experts.") != std::string::npos;
    if (!t.name.ends_with("_proj.weight") && !expert) {
      out.push_back(t);
      continue;
    }
    const int64_t n = t.shape[0], k = t.shape[1];
    const std::string p = t.name.substr(0, t.name.size() - 7);
    const int64_t g = q.group_size > 0 ? q.group_size : k;
    const bool shares_qkv = p.ends_with("q_proj") || p.ends_with("k_proj") || p.ends_with("v_proj");
    const uint64_t seed = static_cast<uint64_t>(k) * 31 + (shares_qkv ? 1 : 2) +
                          (p.ends_with("gate_proj") || p.ends_with("up_proj") ? 5 : 0) +
                          (p.ends_with("o_proj") ? 9 : 0);
    const auto g_idx = q.act_order ? shuffled_g_idx(k, g, seed) : plain_g_idx(k, g);
    std::vector<SafetensorsWriteTensor> packed;
    Int4Source src;
    if (q.packing == "bitsandbytes") {
      src = quantize_nf4_source(floats_of(t), n, k);
      packed = nf4_tensors(t.name, src);
    } else {
      src = quantize_int4_source(floats_of(t), n, k, g, q.zero_points, g_idx);
      if (q.packing == "awq") packed = awq_tensors(p, src);
      if (q.packing == "gptq") packed = gptq_tensors(p, src, q.zeros_minus_one);
      if (q.packing == "compressed-tensors") packed = compressed_tensors(p, src, q.zero_points);
    }
    values[t.name] = src.values();
    out.insert(out.end(), packed.begin(), packed.end());
  }
  return out;
}

}  // namespace ib::testing
