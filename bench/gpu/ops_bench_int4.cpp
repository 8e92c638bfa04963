// The W4A16 matmuls (backend/weight.h kInt4W4A16, groups of 128) at Llama-3-8B's per-layer
// shapes: the W4A16 GEMV (M <= 16) and above it the dequantize-then-cuBLASLt path, timed over
// graph replays as the bf16 and FP8 sections are, so the rows compare directly.
#include <cmath>
#include <cstdio>

#include "backend/cuda/detail/kernels.h"
#include "bench_kernels.h"
#include "ops_bench.h"

namespace ib::bench {

void bench_gemm_int4(BenchContext& ctx) {
  constexpr int64_t kGroup = 128;
  std::map<int64_t, double> layer_us;
  for (const LayerLinear& lin : kLayerLinears) {
    const int64_t groups = lin.k / kGroup;
    const double w_bytes = static_cast<double>(lin.n * lin.k / 2 + lin.n * groups * 3);
    const int copies = static_cast<int>(std::max(1.0, std::ceil(512e6 / w_bytes)));
    std::vector<WeightRef> w;
    for (int c = 0; c < copies; ++c) {
      const Tensor dense = ctx.random(DType::kBF16, {lin.n, lin.k}, 1.0f / std::sqrt(float(lin.k)));
      WeightRef q;
      q.format = WeightFormat::kInt4W4A16;
      q.group_size = static_cast<int>(kGroup);
      q.data = ctx.allocate(DType::kU8, {lin.n, lin.k / 2});
      q.scales = ctx.allocate(DType::kF16, {lin.n, groups});
      q.zeros = ctx.allocate(DType::kU8, {lin.n, groups});
      ctx.backend.quantize_weight(dense, q);
      w.push_back(q);
    }
    for (const int64_t m : {1, 2, 4, 8, 16, 64, 2048}) {
      Tensor x = ctx.random(DType::kBF16, {m, lin.k});
      Tensor out = ctx.random(DType::kBF16, {m, lin.n});
      const double bytes = w_bytes + static_cast<double>(m * lin.k * 2 + m * lin.n * 2);
      const double fl = 2.0 * static_cast<double>(m * lin.n * lin.k);
      const std::string shape =
          std::to_string(m) + "x" + std::to_string(lin.n) + "x" + std::to_string(lin.k);
      const double us =
          ctx.timer.per_call_ms(
              [&](int i) {
                ctx.backend.matmul(x, w[static_cast<size_t>(i % copies)], nullptr, out);
              },
              std::max(2 * copies, 8)) *
          1e3;
      layer_us[m] += us;
      ctx.report.add(
          {"int4", lin.name, shape,
           m <= cuda::gemv_max_m(WeightFormat::kInt4W4A16) ? "gemv_w4a16" : "dequant+cublasLt", us,
           bytes, fl});
    }
  }
  for (const auto& [m, us] : layer_us) {
    std::printf("w4a16 linears per layer, M = %ld: %.1f us\n", static_cast<long>(m), us);
    ctx.report.extra()["int4_layer_linears_us_m" + std::to_string(m)] = us;
  }
  ctx.release();
}

}  // namespace ib::bench
