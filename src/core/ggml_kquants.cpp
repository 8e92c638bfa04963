// ggml's K-quants (core/ggml_blocks.h): Q4_K, Q5_K and Q6_K super-blocks of 256 elements, decoded
// as ggml's published definitions read, and a round-to-nearest encoder whose 6- and 8-bit sub-block
// scales are rounded up, so every element stays within half a step.
#include <algorithm>
#include <array>
#include <cmath>

#include "core/detail/ggml_block_codecs.h"
#include "core/dtype.h"

namespace ib::detail {
namespace {

constexpr int kSuper = 256;

// Q4_K / Q5_K: sub-block j's 6-bit scale and min, packed into 12 bytes. j < 4: the low 6 bits of
// bytes j (scale) and j + 4 (min); j >= 4: the low / high nibble of byte j + 4 (scale / min) with
// their top two bits in the top bits of bytes j - 4 (scale) and j (min).
void unpack_scale_min(const uint8_t* q, int j, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

void pack_scale_min(const std::array<int, 8>& sc, const std::array<int, 8>& m, uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
  }
}

// The smallest integer k in [0, max_k] with k * unit >= v (unit 0: 0).
int ceil_steps(float v, float unit, int max_k) {
  if (unit <= 0) return 0;
  return std::clamp(static_cast<int>(std::ceil(v / unit)), 0, max_k);
}

// The asymmetric 4- or 5-bit codes of a Q4_K / Q5_K super-block: writes d, dmin and the packed
// scales at block, and the codes (0..levels) of the 256 elements to q.
void quantize_affine(const float* x, int levels, uint8_t* block, std::array<uint8_t, kSuper>& q) {
  std::array<float, 8> min_needed{};  // -min(0, min x): the offset that lifts x to >= 0
  std::array<float, 8> max_x{};
  for (int j = 0; j < 8; ++j) {
    const float* s = x + 32 * j;
    min_needed[j] = -std::min(0.0f, *std::min_element(s, s + 32));
    max_x[j] = *std::max_element(s, s + 32);
  }
  const uint16_t dmin_bits =
      f16_at_least(*std::max_element(min_needed.begin(), min_needed.end()) / 63);
  const float dmin = f16_bits_to_f32(dmin_bits);
  std::array<int, 8> m{};
  std::array<float, 8> step_needed{};
  for (int j = 0; j < 8; ++j) {
    m[j] = ceil_steps(min_needed[j], dmin, 63);
    step_needed[j] =
        std::max(0.0f, max_x[j] + dmin * static_cast<float>(m[j])) / static_cast<float>(levels);
  }
  const uint16_t d_bits =
      f16_at_least(*std::max_element(step_needed.begin(), step_needed.end()) / 63);
  const float d = f16_bits_to_f32(d_bits);
  std::array<int, 8> sc{};
  for (int j = 0; j < 8; ++j) sc[j] = ceil_steps(step_needed[j], d, 63);
  store_f16(block, d_bits);
  store_f16(block + 2, dmin_bits);
  pack_scale_min(sc, m, block + 4);
  for (int j = 0; j < 8; ++j) {
    const float step = d * static_cast<float>(sc[j]);
    const float offset = dmin * static_cast<float>(m[j]);
    for (int l = 0; l < 32; ++l) {
      const float v = step > 0 ? std::nearbyint((x[32 * j + l] + offset) / step) : 0.0f;
      q[static_cast<size_t>(32 * j + l)] =
          static_cast<uint8_t>(std::clamp(v, 0.0f, static_cast<float>(levels)));
    }
  }
}

// Q4_K / Q5_K: x = d * sc * code - dmin * m in each 32-element sub-block j; the code's low four
// bits are nibble j % 2 of qs[32 * (j / 2) + l] and, for Q5_K (qh not null), its fifth bit is
// bit j of qh[l].
void dequantize_affine(const uint8_t* block, const uint8_t* qh, const uint8_t* qs, float* out) {
  const float d = load_f16(block);
  const float dmin = load_f16(block + 2);
  for (int j = 0; j < 8; ++j) {
    int sc = 0;
    int m = 0;
    unpack_scale_min(block + 4, j, sc, m);
    const float step = d * static_cast<float>(sc);
    const float offset = dmin * static_cast<float>(m);
    const uint8_t* q = qs + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      int code = (q[l] >> shift) & 0xF;
      if (qh != nullptr) code |= ((qh[l] >> j) & 1) << 4;
      out[32 * j + l] = step * static_cast<float>(code) - offset;
    }
  }
}

// The inverse of dequantize_affine's code layout.
void pack_affine(const std::array<uint8_t, kSuper>& q, uint8_t* qh, uint8_t* qs) {
  std::fill(qs, qs + 128, uint8_t{0});
  if (qh != nullptr) std::fill(qh, qh + 32, uint8_t{0});
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t code = q[static_cast<size_t>(32 * j + l)];
      uint8_t& low = qs[32 * (j / 2) + l];
      low = static_cast<uint8_t>(low | ((code & 0xF) << (4 * (j % 2))));
      if (qh != nullptr) qh[l] = static_cast<uint8_t>(qh[l] | ((code >> 4) << j));
    }
  }
}

}  // namespace

void dequantize_q4_k(const uint8_t* block, float* out) {
  dequantize_affine(block, nullptr, block + 16, out);
}

void quantize_q4_k(const float* x, uint8_t* block) {
  std::array<uint8_t, kSuper> q{};
  quantize_affine(x, 15, block, q);
  pack_affine(q, nullptr, block + 16);
}

void dequantize_q5_k(const uint8_t* block, float* out) {
  dequantize_affine(block, block + 16, block + 48, out);
}

void quantize_q5_k(const float* x, uint8_t* block) {
  std::array<uint8_t, kSuper> q{};
  quantize_affine(x, 31, block, q);
  pack_affine(q, block + 16, block + 48);
}

// Q6_K: element 128 * n + 32 * k + l (half n, quarter k, l < 32) has its low four bits in
// ql[64 * n + l + 32 * (k % 2)] (low nibble for k < 2, high for k >= 2), its top two bits at bits
// 2k..2k+1 of qh[32 * n + l], and scale scales[8 * n + 2 * k + l / 16].
void dequantize_q6_k(const uint8_t* block, float* out) {
  const uint8_t* ql = block;
  const uint8_t* qh = block + 128;
  const auto* scales = reinterpret_cast<const int8_t*>(block + 192);
  const float d = load_f16(block + 208);
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int low = (ql[64 * n + l + 32 * (k % 2)] >> (4 * (k / 2))) & 0xF;
        const int high = (qh[32 * n + l] >> (2 * k)) & 3;
        const int sc = scales[8 * n + 2 * k + l / 16];
        out[128 * n + 32 * k + l] =
            d * static_cast<float>(sc) * static_cast<float>((low | (high << 4)) - 32);
      }
    }
  }
}

void quantize_q6_k(const float* x, uint8_t* block) {
  std::array<float, 16> step_needed{};  // codes -32..31: 31 steps cover the largest magnitude
  for (int j = 0; j < 16; ++j) {
    float amax = 0;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[16 * j + l]));
    step_needed[j] = amax / 31;
  }
  const uint16_t d_bits =
      f16_at_least(*std::max_element(step_needed.begin(), step_needed.end()) / 127);
  const float d = f16_bits_to_f32(d_bits);
  uint8_t* ql = block;
  uint8_t* qh = block + 128;
  auto* scales = reinterpret_cast<int8_t*>(block + 192);
  std::fill(block, block + 192, uint8_t{0});
  for (int j = 0; j < 16; ++j) scales[j] = static_cast<int8_t>(ceil_steps(step_needed[j], d, 127));
  store_f16(block + 208, d_bits);
  for (int n = 0; n < 2; ++n) {
    for (int k = 0; k < 4; ++k) {
      for (int l = 0; l < 32; ++l) {
        const int e = 128 * n + 32 * k + l;
        const float step = d * static_cast<float>(scales[8 * n + 2 * k + l / 16]);
        const float v = step > 0 ? std::clamp(std::nearbyint(x[e] / step), -32.0f, 31.0f) : 0.0f;
        const int code = static_cast<int>(v) + 32;
        uint8_t& low = ql[64 * n + l + 32 * (k % 2)];
        low = static_cast<uint8_t>(low | ((code & 0xF) << (4 * (k / 2))));
        qh[32 * n + l] = static_cast<uint8_t>(qh[32 * n + l] | ((code >> 4) << (2 * k)));
      }
    }
  }
}

}  // namespace ib::detail
