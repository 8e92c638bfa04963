// The quantized CPU matmuls' shared loop (quant.cpp, quant_int4.cpp): w's rows decoded to fp32 16
// at a time into a buffer that stays in L1/L2 while every x row passes.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend/cpu/detail/dot.h"
#include "core/thread_pool.h"

namespace ib::cpu {

// w rows decoded per task.
inline constexpr int64_t kDecodedRowsPerTask = 16;

// out (m, n) = dot_f32(x[r], decoded row j) * x_scales[r] (1 where null) * w_scale(j) (+ bias[j]);
// decode_rows(n0, count, rows) writes rows n0 .. n0 + count - 1 of w, k floats each.
template <typename DecodeRows, typename RowScale>
void matmul_decoded_rows(ThreadPool& pool, const float* x, const float* x_scales,
                         DecodeRows decode_rows, RowScale w_scale, const float* bias, float* out,
                         int64_t m, int64_t n, int64_t k) {
  const int64_t tasks = (n + kDecodedRowsPerTask - 1) / kDecodedRowsPerTask;
  pool.parallel_for(tasks, 1, [&](int64_t t_begin, int64_t t_end) {
    std::vector<float> rows(static_cast<size_t>(kDecodedRowsPerTask * k));
    for (int64_t t = t_begin; t < t_end; ++t) {
      const int64_t n0 = t * kDecodedRowsPerTask;
      const int64_t count = std::min(kDecodedRowsPerTask, n - n0);
      decode_rows(n0, count, rows.data());
      for (int64_t r = 0; r < m; ++r) {
        const float sx = x_scales ? x_scales[r] : 1.0f;
        for (int64_t j = 0; j < count; ++j) {
          float y = dot_f32(x + r * k, rows.data() + j * k, k) * sx * w_scale(n0 + j);
          if (bias) y += bias[n0 + j];
          out[r * n + n0 + j] = y;
        }
      }
    }
  });
}

}  // namespace ib::cpu
