// The FP8 (W8A8 E4M3) matmuls at Llama-3-8B's per-layer shapes: the GEMV (M <= 8) and the
// cuBLASLt E4M3 GEMM with outer-vector scales (above), timed over graph replays as the bf16
// section is, so the two sections' rows compare directly.
#include <cmath>
#include <cstdio>

#include "backend/cuda/detail/kernels.h"
#include "bench_kernels.h"
#include "ops_bench.h"

namespace ib::bench {

void bench_gemm_fp8(BenchContext& ctx) {
  std::map<int64_t, double> layer_us;
  for (const LayerLinear& lin : kLayerLinears) {
    const double w_bytes = static_cast<double>(lin.n * lin.k + lin.n * 4);
    const int copies = static_cast<int>(std::max(1.0, std::ceil(512e6 / w_bytes)));
    std::vector<WeightRef> w;
    for (int c = 0; c < copies; ++c) {
      const Tensor dense = ctx.random(DType::kBF16, {lin.n, lin.k}, 1.0f / std::sqrt(float(lin.k)));
      WeightRef q;
      q.format = WeightFormat::kFp8E4M3;
      q.data = ctx.allocate(DType::kF8E4M3, {lin.n, lin.k});
      q.scales = ctx.allocate(DType::kF32, {lin.n});
      ctx.backend.quantize_weight(dense, q);
      w.push_back(q);
    }
    for (const int64_t m : {1, 2, 4, 8, 16, 32, 64, 256, 2048}) {
      Tensor x = ctx.random(DType::kBF16, {m, lin.k});
      Tensor out = ctx.random(DType::kBF16, {m, lin.n});
      const auto [shape, bytes, fl] = matmul_row(m, lin, w_bytes);
      const auto time_us = [&](const auto& fn) {
        return ctx.timer.per_call_ms(fn, std::max(2 * copies, 8)) * 1e3;
      };
      // Both paths where the GEMV takes the shape, then the backend's default choice.
      double best = 1e30;
      for (const int max_m : {cuda::kGemvFusedMaxM, 0}) {  // the FP8 GEMV takes up to 8 rows
        if (max_m == 0 && m < 8) continue;                 // cuBLASLt at 1-4 rows: not a contender
        if (max_m > 0 && m > max_m) continue;
        ctx.backend.set_fp8_gemv_max_m(max_m);
        const double us = time_us([&](int i) {
          ctx.backend.matmul(x, w[static_cast<size_t>(i % copies)], nullptr, out);
        });
        best = std::min(best, us);
        ctx.report.add(
            {"fp8", lin.name, shape, max_m ? "gemv_fp8" : "cublasLt_fp8", us, bytes, fl});
      }
      ctx.backend.set_fp8_gemv_max_m(8);  // the default
      layer_us[m] += best;
      if (m == 1) {
        // The same bytes in bf16 (K / 2): the streaming rate the FP8 GEMV aims at (its blocks
        // hold 16 rows of the same bytes).
        // (As many copies as the FP8 weights, so no call finds its weights in L2.)
        std::vector<Tensor> half_k;
        for (int c = 0; c < copies; ++c)
          half_k.push_back(ctx.random(DType::kBF16, {lin.n, lin.k / 2}, 0.01f));
        const Tensor x_half = ctx.random(DType::kBF16, {1, lin.k / 2});
        const double dense_us = time_us([&](int i) {
          launch_gemv_variant(0, x_half, half_k[static_cast<size_t>(i % copies)], out,
                              ctx.backend.stream());
        });
        ctx.report.add(
            {"fp8_variant", lin.name, shape, "bf16 w8u2 at K/2 (same bytes)", dense_us, bytes, fl});
      }
    }
  }
  for (const auto& [m, us] : layer_us) {
    std::printf("fp8 linears per layer (faster path), M = %ld: %.1f us\n", static_cast<long>(m),
                us);
    ctx.report.extra()["fp8_layer_linears_us_m" + std::to_string(m)] = us;
  }
  ctx.release();
}

}  // namespace ib::bench
