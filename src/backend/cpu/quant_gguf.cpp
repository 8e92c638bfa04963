// kGguf on the CPU (backend/weight.h): a GGUF file's matmul weights in llama.cpp's block formats,
// rows dequantized by core/ggml_blocks.h, activations through their per-32 int8 round trip; the
// oracle of the CUDA GGUF kernels.
#include <algorithm>
#include <cmath>
#include <span>
#include <string_view>
#include <vector>

#include "backend/cpu/detail/decoded_matmul.h"
#include "backend/cpu/detail/kernels.h"

namespace ib::cpu {

void quantize_blocks_q8(const float* x, int64_t m, int64_t k, float* out_x) {
  constexpr int64_t kBlock = 32;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t b = 0; b < k; b += kBlock) {
      const float* xb = x + r * k + b;
      float* ob = out_x + r * k + b;
      const int64_t len = std::min(kBlock, k - b);
      float amax = 0.0f;
      for (int64_t i = 0; i < len; ++i) amax = std::max(amax, std::fabs(xb[i]));
      if (amax == 0.0f) {
        std::fill(ob, ob + len, 0.0f);
        continue;
      }
      const float inv = 127.0f / amax;
      const float d = amax / 127.0f;
      for (int64_t i = 0; i < len; ++i) {
        const float q = std::clamp(std::nearbyint(xb[i] * inv), -127.0f, 127.0f);
        ob[i] = q * d;
      }
    }
  }
}

void dequantize_gguf_row(const WeightRef& w, int64_t n, float* out) {
  const GgmlType type = w.gguf.type[w.gguf.segment_of(n)];
  const int64_t k = w.cols();
  const int64_t bytes = gguf_row_bytes(type, k);
  const auto* row = w.data.as<const char>() + n * w.data.dim(1);
  const Status st = dequantize_ggml(type, std::string_view(row, static_cast<size_t>(bytes)),
                                    std::span<float>(out, static_cast<size_t>(k)));
  IB_ASSERT(st.ok(), "dequantize_gguf_row: a row that is not whole blocks of its type");
}

void matmul_gguf(ThreadPool& pool, const float* x, const WeightRef& w, const float* bias,
                 float* out, int64_t m) {
  const int64_t n = w.rows();
  const int64_t k = w.cols();
  if (m == 0 || n == 0) return;
  std::vector<float> xq(static_cast<size_t>(m * k));
  quantize_blocks_q8(x, m, k, xq.data());
  matmul_decoded_rows(
      pool, xq.data(), nullptr,
      [&](int64_t n0, int64_t count, float* rows) {
        for (int64_t j = 0; j < count; ++j) dequantize_gguf_row(w, n0 + j, rows + j * k);
      },
      [](int64_t) { return 1.0f; }, bias, out, m, n, k);
}

}  // namespace ib::cpu
