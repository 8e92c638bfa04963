// The quantized formats on the CPU, exactly as backend/weight.h defines them: the oracle of the
// CUDA kernels. FP8 E4M3 (W8A8) and INT8 W8A16 values are decoded to fp32 (exactly: every E4M3
// and int8 value is an fp32) and the products summed with dot_f32; INT8 W8A8 sums in int32.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "backend/cpu/detail/decoded_matmul.h"
#include "backend/cpu/detail/dot.h"
#include "backend/cpu/detail/kernels.h"

namespace ib::cpu {
namespace {

const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int c = 0; c < 256; ++c)
      t[static_cast<size_t>(c)] = f8e4m3_bits_to_f32(static_cast<uint8_t>(c));
    return t;
  }();
  return table;
}

}  // namespace

namespace {

// One row quantized symmetrically to codes of magnitude at most top: inv = top / max |x| (0 for
// a zero row, which stays (signed) zero), q = code(x * inv); returns the scale max |x| / top (1
// for a zero row).
template <typename TQ, typename Code>
float quantize_row(const float* x, int64_t k, TQ* q, float top, Code code) {
  float amax = 0.0f;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inv = amax == 0.0f ? 0.0f : top / amax;
  for (int64_t i = 0; i < k; ++i) q[i] = code(x[i], inv);
  return amax == 0.0f ? 1.0f : amax / top;
}

template <typename TQ, typename RowFn>
void quantize_rows(ThreadPool& pool, const float* dense, int64_t n, int64_t k, TQ* data,
                   float* scales, RowFn row) {
  pool.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) scales[r] = row(dense + r * k, k, data + r * k);
  });
}

}  // namespace

float quantize_row_fp8(const float* x, int64_t k, uint8_t* q) {
  return quantize_row(x, k, q, kF8E4M3Max,
                      [](float v, float inv) { return f32_to_f8e4m3_bits(v * inv); });
}

void quantize_rows_fp8(ThreadPool& pool, const float* dense, int64_t n, int64_t k, uint8_t* data,
                       float* scales) {
  quantize_rows(pool, dense, n, k, data, scales, quantize_row_fp8);
}

int8_t quantize_int8(float v, float inv) {
  const float r = std::nearbyint(v * inv);  // the default rounding mode: to nearest even
  return static_cast<int8_t>(std::clamp(r, -kInt8Max, kInt8Max));
}

float quantize_row_int8(const float* x, int64_t k, int8_t* q) {
  return quantize_row(x, k, q, kInt8Max, quantize_int8);
}

void quantize_rows_int8(ThreadPool& pool, const float* dense, int64_t n, int64_t k, int8_t* data,
                        float* scales) {
  quantize_rows(pool, dense, n, k, data, scales, quantize_row_int8);
}

namespace {

// matmul_decoded_rows with w's codes decoded one by one (decode(code) -> f32, exact) and the
// per-row scales w_scales.
template <typename TW, typename Decode>
void matmul_decoded(ThreadPool& pool, const float* x, const float* x_scales, const TW* w,
                    Decode decode, const float* w_scales, const float* bias, float* out, int64_t m,
                    int64_t n, int64_t k) {
  matmul_decoded_rows(
      pool, x, x_scales,
      [&](int64_t n0, int64_t count, float* rows) {
        for (int64_t i = 0; i < count * k; ++i) rows[i] = decode(w[n0 * k + i]);
      },
      [&](int64_t j) { return w_scales[j]; }, bias, out, m, n, k);
}

}  // namespace

void matmul_int8_w8a16(ThreadPool& pool, const float* x, const int8_t* w, const float* w_scales,
                       const float* bias, float* out, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0) return;
  matmul_decoded(
      pool, x, nullptr, w, [](int8_t c) { return static_cast<float>(c); }, w_scales, bias, out, m,
      n, k);
}

void matmul_int8_w8a8(ThreadPool& pool, const float* x, const int8_t* w, const float* w_scales,
                      const float* bias, float* out, int64_t m, int64_t n, int64_t k,
                      const StaticInt8Activations* fixed) {
  if (m == 0 || n == 0) return;
  const bool is_static = fixed != nullptr && fixed->scale > 0.0f;
  // Codes as the tensor cores take them (asymmetric: u - 128), and the zero point in that range.
  std::vector<int8_t> xq(static_cast<size_t>(m * k));
  std::vector<float> x_scales(static_cast<size_t>(m));
  const int32_t zero = is_static && fixed->asymmetric ? fixed->zero_point - 128 : 0;
  const float inv = is_static ? 1.0f / fixed->scale : 0.0f;  // x * inv, as the CUDA kernels
  pool.parallel_for(m, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      int8_t* q = xq.data() + r * k;
      if (!is_static) {
        x_scales[static_cast<size_t>(r)] = quantize_row_int8(x + r * k, k, q);
        continue;
      }
      x_scales[static_cast<size_t>(r)] = fixed->scale;
      for (int64_t i = 0; i < k; ++i) {
        const float v = std::nearbyint(x[r * k + i] * inv);
        q[i] =
            fixed->asymmetric
                ? static_cast<int8_t>(
                      std::clamp(v + static_cast<float>(fixed->zero_point), 0.0f, 255.0f) - 128.0f)
                : static_cast<int8_t>(std::clamp(v, -kInt8Max, kInt8Max));
      }
    }
  });
  pool.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t j = begin; j < end; ++j) {
      const int8_t* wr = w + j * k;
      int32_t row_sum = 0;  // the zero point's correction: sum_k data[j][k]
      if (zero != 0)
        for (int64_t i = 0; i < k; ++i) row_sum += wr[i];
      for (int64_t r = 0; r < m; ++r) {
        const int8_t* xr = xq.data() + r * k;
        int64_t acc = 0;  // int32 in the kernels: |acc| <= 128 * 127 * k
        for (int64_t i = 0; i < k; ++i) acc += int32_t{xr[i]} * int32_t{wr[i]};
        acc -= int64_t{zero} * row_sum;
        float y = static_cast<float>(acc) * x_scales[static_cast<size_t>(r)] * w_scales[j];
        if (bias) y += bias[j];
        out[r * n + j] = y;
      }
    }
  });
}

void matmul_fp8(ThreadPool& pool, const float* x, const uint8_t* w, const float* w_scales,
                const float* bias, float* out, int64_t m, int64_t n, int64_t k, float input_scale) {
  if (m == 0 || n == 0) return;
  const auto& table = fp8_table();
  // The activations, quantized per token and decoded.
  std::vector<float> xq(static_cast<size_t>(m * k));
  std::vector<float> x_scales(static_cast<size_t>(m));
  pool.parallel_for(m, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> q(static_cast<size_t>(k));
    const float inv = input_scale > 0.0f ? 1.0f / input_scale : 0.0f;
    for (int64_t r = begin; r < end; ++r) {
      if (input_scale > 0.0f) {  // static: one scale for every token
        for (int64_t i = 0; i < k; ++i)
          q[static_cast<size_t>(i)] = f32_to_f8e4m3_bits(x[r * k + i] * inv);
        x_scales[static_cast<size_t>(r)] = input_scale;
      } else {
        x_scales[static_cast<size_t>(r)] = quantize_row_fp8(x + r * k, k, q.data());
      }
      for (int64_t i = 0; i < k; ++i)
        xq[static_cast<size_t>(r * k + i)] = table[q[static_cast<size_t>(i)]];
    }
  });
  matmul_decoded(
      pool, xq.data(), x_scales.data(), w, [&](uint8_t c) { return table[c]; }, w_scales, bias, out,
      m, n, k);
}

}  // namespace ib::cpu
