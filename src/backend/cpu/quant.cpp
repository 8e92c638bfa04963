// FP8 E4M3 (W8A8) on the CPU, exactly as backend/weight.h defines the format: the oracle of the
// CUDA kernels. Quantized values are decoded to fp32 (exactly: every E4M3 value is an fp32) and
// the products summed with dot_f32.
#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

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

// w rows decoded per task: 16 rows of K floats stay in L1/L2 while every x row passes.
constexpr int64_t kRowsPerTask = 16;

}  // namespace

float quantize_row_fp8(const float* x, int64_t k, uint8_t* q) {
  float amax = 0.0f;
  for (int64_t i = 0; i < k; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float inv = amax == 0.0f ? 0.0f : kF8E4M3Max / amax;  // a zero row stays (signed) zero
  for (int64_t i = 0; i < k; ++i) q[i] = f32_to_f8e4m3_bits(x[i] * inv);
  return amax == 0.0f ? 1.0f : amax / kF8E4M3Max;
}

void quantize_rows_fp8(ThreadPool& pool, const float* dense, int64_t n, int64_t k, uint8_t* data,
                       float* scales) {
  pool.parallel_for(n, 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      scales[r] = quantize_row_fp8(dense + r * k, k, data + r * k);
  });
}

void matmul_fp8(ThreadPool& pool, const float* x, const uint8_t* w, const float* w_scales,
                const float* bias, float* out, int64_t m, int64_t n, int64_t k) {
  if (m == 0 || n == 0) return;
  const auto& table = fp8_table();
  // The activations, quantized per token and decoded.
  std::vector<float> xq(static_cast<size_t>(m * k));
  std::vector<float> x_scales(static_cast<size_t>(m));
  pool.parallel_for(m, 1, [&](int64_t begin, int64_t end) {
    std::vector<uint8_t> q(static_cast<size_t>(k));
    for (int64_t r = begin; r < end; ++r) {
      x_scales[static_cast<size_t>(r)] = quantize_row_fp8(x + r * k, k, q.data());
      for (int64_t i = 0; i < k; ++i)
        xq[static_cast<size_t>(r * k + i)] = table[q[static_cast<size_t>(i)]];
    }
  });
  const int64_t tasks = (n + kRowsPerTask - 1) / kRowsPerTask;
  pool.parallel_for(tasks, 1, [&](int64_t t_begin, int64_t t_end) {
    std::vector<float> rows(static_cast<size_t>(kRowsPerTask * k));
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t n0 = t * kRowsPerTask;
      const int64_t count = std::min(kRowsPerTask, n - n0);
      for (int64_t i = 0; i < count * k; ++i) rows[static_cast<size_t>(i)] = table[w[n0 * k + i]];
      for (int64_t r = 0; r < m; ++r) {
        const float* xr = xq.data() + r * k;
        for (int64_t j = 0; j < count; ++j) {
          const float acc = dot_f32(xr, rows.data() + j * k, k);
          float y = acc * x_scales[static_cast<size_t>(r)] * w_scales[n0 + j];
          if (bias) y += bias[n0 + j];
          out[r * n + n0 + j] = y;
        }
      }
    }
  });
}

}  // namespace ib::cpu
