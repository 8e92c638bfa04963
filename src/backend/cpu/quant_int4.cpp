// The 4-bit formats on the CPU (kInt4W4A16, kNf4), exactly as backend/weight.h defines them: rows
// are dequantized to fp32, then summed with dot_f32; the oracle of the CUDA W4A16 kernels.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/detail/decoded_matmul.h"
#include "backend/cpu/detail/kernels.h"

namespace ib::cpu {
namespace {

uint8_t code_at(const uint8_t* row, int64_t k, bool high_first) {
  const uint8_t byte = row[k / 2];
  const bool high = (k % 2 == 0) == high_first;
  return high ? static_cast<uint8_t>(byte >> 4) : static_cast<uint8_t>(byte & 0x0F);
}

void set_code(uint8_t* row, int64_t k, uint8_t q, bool high_first) {
  uint8_t& byte = row[k / 2];
  if ((k % 2 == 0) == high_first) {
    byte = static_cast<uint8_t>((byte & 0x0F) | (q << 4));
  } else {
    byte = static_cast<uint8_t>((byte & 0xF0) | q);
  }
}

// One group of an int4 row quantized (weight.h): writes q into row at [k0, k0 + g) and returns
// the scale as f16 bits and the zero point.
void quantize_int4_group(const float* w, int64_t g, bool asymmetric, uint8_t* row, int64_t k0,
                         uint16_t* scale_bits, uint8_t* zero) {
  float s = 1.0f;
  float z = 8.0f;
  if (asymmetric) {
    float lo = w[0], hi = w[0];
    for (int64_t i = 1; i < g; ++i) {
      lo = std::min(lo, w[i]);
      hi = std::max(hi, w[i]);
    }
    s = std::max(hi - lo, 1e-5f) / 15.0f;
    *scale_bits = f32_to_f16_bits(s);
    s = f16_bits_to_f32(*scale_bits);
    z = std::clamp(std::nearbyint(-lo / s), 0.0f, 15.0f);
  } else {
    float amax = 0.0f;
    for (int64_t i = 0; i < g; ++i) amax = std::max(amax, std::fabs(w[i]));
    s = amax == 0.0f ? 1.0f : amax / 7.5f;
    *scale_bits = f32_to_f16_bits(s);
    s = f16_bits_to_f32(*scale_bits);
  }
  *zero = static_cast<uint8_t>(z);
  for (int64_t i = 0; i < g; ++i) {
    // A scale that rounds to f16 zero (|w| below 2^-24 * 7.5) stores the zero point: w = 0.
    const float q = s == 0.0f ? z : std::clamp(std::nearbyint(w[i] / s) + z, 0.0f, 15.0f);
    set_code(row, k0 + i, static_cast<uint8_t>(q), false);
  }
}

// The NF4 code nearest x (ties to the lower code).
uint8_t nearest_nf4(float x) {
  uint8_t best = 0;
  float best_d = std::fabs(x - kNf4Levels[0]);
  for (uint8_t c = 1; c < 16; ++c) {
    const float d = std::fabs(x - kNf4Levels[c]);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

void quantize_nf4_block(const float* w, int64_t g, uint8_t* row, int64_t k0, float* absmax) {
  float amax = 0.0f;
  for (int64_t i = 0; i < g; ++i) amax = std::max(amax, std::fabs(w[i]));
  if (amax == 0.0f) amax = 1.0f;
  *absmax = amax;
  for (int64_t i = 0; i < g; ++i) set_code(row, k0 + i, nearest_nf4(w[i] / amax), true);
}

}  // namespace

void dequantize_4bit_row(const WeightRef& w, int64_t n, float* out) {
  const int64_t k = w.cols();
  const int64_t g = w.group_size;
  const int64_t groups = k / g;
  const uint8_t* row = w.data.as<const uint8_t>() + n * (k / 2);
  if (w.format == WeightFormat::kNf4) {
    const float* absmax = w.scales.as<const float>() + n * groups;
    for (int64_t i = 0; i < k; ++i) out[i] = kNf4Levels[code_at(row, i, true)] * absmax[i / g];
    return;
  }
  const uint16_t* scales = w.scales.as<const uint16_t>() + n * groups;
  const uint8_t* zeros = w.zeros.as<const uint8_t>() + n * groups;
  for (int64_t gi = 0; gi < groups; ++gi) {
    const float s = f16_bits_to_f32(scales[gi]);
    const int z = zeros[gi];
    for (int64_t i = gi * g; i < (gi + 1) * g; ++i)
      out[i] = static_cast<float>(int{code_at(row, i, false)} - z) * s;
  }
}

void matmul_4bit(ThreadPool& pool, const float* x, const WeightRef& w, const float* bias,
                 float* out, int64_t m) {
  const int64_t n = w.rows();
  const int64_t k = w.cols();
  if (m == 0 || n == 0) return;
  // Act-order: column k of w multiplies input feature input_perm[k].
  std::vector<float> permuted;
  if (!w.input_perm.empty()) {
    const int32_t* perm = w.input_perm.as<const int32_t>();
    permuted.resize(static_cast<size_t>(m * k));
    for (int64_t r = 0; r < m; ++r)
      for (int64_t i = 0; i < k; ++i) permuted[static_cast<size_t>(r * k + i)] = x[r * k + perm[i]];
    x = permuted.data();
  }
  matmul_decoded_rows(
      pool, x, nullptr,
      [&](int64_t n0, int64_t count, float* rows) {
        for (int64_t j = 0; j < count; ++j) dequantize_4bit_row(w, n0 + j, rows + j * k);
      },
      [](int64_t) { return 1.0f; }, bias, out, m, n, k);
}

void quantize_4bit(ThreadPool& pool, const float* dense, const WeightRef& out) {
  const int64_t n = out.rows();
  const int64_t k = out.cols();
  const int64_t g = out.group_size;
  const int64_t groups = k / g;
  pool.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      uint8_t* row = out.data.as<uint8_t>() + r * (k / 2);
      for (int64_t gi = 0; gi < groups; ++gi) {
        const float* w = dense + r * k + gi * g;
        if (out.format == WeightFormat::kNf4) {
          quantize_nf4_block(w, g, row, gi * g, out.scales.as<float>() + r * groups + gi);
        } else {
          quantize_int4_group(w, g, out.asymmetric, row, gi * g,
                              out.scales.as<uint16_t>() + r * groups + gi,
                              out.zeros.as<uint8_t>() + r * groups + gi);
        }
      }
    }
  });
}

}  // namespace ib::cpu
