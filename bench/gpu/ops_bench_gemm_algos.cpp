// The cuBLASLt algorithms behind a continuous run's GEMMs (IB_OPS_SECTIONS=gemm_algos): for
// Llama-3-8B's linears at a continuous run's decode batches (256-1,024 rows) and a prefill chunk
// (4,096), the matmul as the engine runs it (the heuristic's algorithm, at the backend's row
// bucket) and each of the heuristic's first candidates at the exact row count
// (CudaBackend::tune_gemm), so that what choosing among them would gain is measured first.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ops_bench.h"

namespace ib::bench {

void bench_gemm_algos(BenchContext& ctx) {
  const LayerLinear head{"lm_head", kVocab, kHidden};
  std::vector<LayerLinear> linears(std::begin(kLayerLinears), std::end(kLayerLinears));
  linears.push_back(head);
  for (const int64_t m : {256, 512, 1000, 1024, 4096}) {
    for (const LayerLinear& lin : linears) {
      const bool logits = std::string(lin.name) == "lm_head";  // f32 out, as the engine's head
      Tensor w = ctx.random(DType::kBF16, {lin.n, lin.k}, 1.0f / std::sqrt(float(lin.k)));
      Tensor x = ctx.random(DType::kBF16, {m, lin.k});
      Tensor out = ctx.random(logits ? DType::kF32 : DType::kBF16, {m, lin.n});
      const double fl = 2.0 * static_cast<double>(m * lin.n) * static_cast<double>(lin.k);
      const double bytes = static_cast<double>(lin.n * lin.k * 2 + m * lin.k * 2) +
                           static_cast<double>(m * lin.n) * (logits ? 4 : 2);
      const std::string shape =
          std::to_string(m) + "x" + std::to_string(lin.n) + "x" + std::to_string(lin.k);
      const double engine_us =
          1e3 * ctx.timer.per_call_ms([&](int) { ctx.backend.matmul(x, w, nullptr, out); }, 4, 9);
      ctx.report.add({"gemm_algos", lin.name, shape, "engine", engine_us, bytes, fl});
      std::vector<double> candidates_us;
      ctx.backend.tune_gemm(x, w, out, [&](const std::function<void()>& fn) {
        const double ms = ctx.timer.per_call_ms([&](int) { fn(); }, 4, 9);
        candidates_us.push_back(ms * 1e3);
        return static_cast<float>(ms);
      });
      for (size_t i = 0; i < candidates_us.size(); ++i) {
        ctx.report.add({"gemm_algos", lin.name, shape, "cand" + std::to_string(i), candidates_us[i],
                        bytes, fl});
      }
      if (!candidates_us.empty()) {
        const double best = *std::min_element(candidates_us.begin(), candidates_us.end());
        std::printf(
            "gemm_algos %s M=%ld: engine %.1f us, heuristic's first at M %.1f us, best of "
            "%zu %.1f us (%+.1f %% against the engine)\n",
            lin.name, static_cast<long>(m), engine_us, candidates_us[0], candidates_us.size(), best,
            100.0 * (best - engine_us) / engine_us);
        ctx.report.extra()["gemm_algos_" + std::string(lin.name) + "_m" + std::to_string(m)] = {
            {"engine_us", engine_us}, {"candidates_us", candidates_us}};
      }
      ctx.release();
    }
  }
}

}  // namespace ib::bench
