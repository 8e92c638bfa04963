// The W4A16 matmuls (backend/weight.h kInt4W4A16, groups of 128) at Llama-3-8B's per-layer
// shapes: the W4A16 GEMV (M <= 16) and above it the dequantize-then-cuBLASLt path, timed over
// graph replays as the bf16 and FP8 sections are, so the rows compare directly.
// IB_OPS_INT4_M: the token counts to time (comma-separated; default 1,2,4,8,16,64,2048).
// IB_OPS_PERSIST: the GEMV's persistent-grid settings to time (IB_GEMV_PERSIST values,
// comma-separated; default: the backend's setting only); each row's kernel name carries it.
// IB_OPS_RING: the GEMV's weight-ring settings to time (IB_GEMV_RING values, comma-separated;
// default: the process's setting only), likewise in each row's kernel name.
// IB_OPS_INT4_WARPS: the ring GEMV's warps per block to time (IB_GEMV_INT4_WARPS values,
// comma-separated; default: the process's setting only); rows and keys of 4, 2 or 0 (auto) say so.
// IB_OPS_LINEARS: the layer's linears to time (comma-separated names; default all).
// IB_OPS_QUANT_GEMM: past the GEMV, the IB_QUANT_GEMM row limits to time (comma-separated;
// default: the backend's setting only): 0 is the dequantize-then-cuBLASLt path, a limit of at
// least M the tensor-core GEMM (quant_gemm.cu); each row's kernel name says which ran.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "backend/cuda/detail/kernels.h"
#include "bench_kernels.h"
#include "ops_bench.h"

namespace ib::bench {

namespace {

std::vector<int64_t> env_list(const char* name, std::vector<int64_t> fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == 0) return fallback;
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

}  // namespace

void bench_gemm_int4(BenchContext& ctx) {
  constexpr int64_t kGroup = 128;
  const std::vector<int64_t> ms = env_list("IB_OPS_INT4_M", {1, 2, 4, 8, 16, 64, 2048});
  const std::vector<int64_t> persists =
      env_list("IB_OPS_PERSIST", {cuda::gemv_persist_blocks_per_sm()});
  const int saved_persist = cuda::gemv_persist_blocks_per_sm();
  const std::vector<int64_t> rings = env_list("IB_OPS_RING", {cuda::gemv_ring() ? 1 : 0});
  const bool saved_ring = cuda::gemv_ring();
  const std::vector<int64_t> warps_list = env_list("IB_OPS_INT4_WARPS", {cuda::gemv_int4_warps()});
  const int saved_warps = cuda::gemv_int4_warps();
  const int64_t saved_quant_gemm = ctx.backend.quant_gemm_rows();
  const std::vector<int64_t> quant_gemms = env_list("IB_OPS_QUANT_GEMM", {saved_quant_gemm});
  // The GEMM's scratch comes with the weights when a limit is set as they are made.
  ctx.backend.set_quant_gemm_rows(*std::max_element(quant_gemms.begin(), quant_gemms.end()));
  std::map<std::string, double> layer_us;
  const char* only = std::getenv("IB_OPS_LINEARS");
  for (const LayerLinear& lin : kLayerLinears) {
    if (only != nullptr && *only != 0 && !listed(only, lin.name)) continue;
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
    for (const int64_t quant_gemm : quant_gemms)
      for (const int64_t warps : warps_list)
        for (const int64_t ring : rings)
          for (const int64_t persist : persists)
            for (const int64_t m : ms) {
              cuda::set_gemv_persist_blocks_per_sm(static_cast<int>(persist));
              cuda::set_gemv_ring(ring == 1);
              cuda::set_gemv_int4_warps(static_cast<int>(warps));
              ctx.backend.set_quant_gemm_rows(quant_gemm);
              const bool gemv = m <= cuda::gemv_max_m(WeightFormat::kInt4W4A16);
              // the same dequantizing path (or GEMM); the GEMV once
              if (!gemv && (persist != persists.front() || ring != rings.front() ||
                            warps != warps_list.front()))
                continue;
              if (gemv && quant_gemm != quant_gemms.front()) continue;
              const bool tensor_core_gemm = !gemv && m <= quant_gemm;
              // The warps setting reaches only the ring at 1-4 tokens without a persistent grid.
              const bool warps_apply = ring == 1 && persist == 0 && m <= 4;
              if (gemv && !warps_apply && warps != warps_list.front()) continue;
              char tag[16] = "";
              if (gemv && warps_apply && warps == 0) std::snprintf(tag, sizeof tag, "_wauto");
              if (gemv && warps_apply && warps != 8 && warps != 0)
                std::snprintf(tag, sizeof tag, "_w%ld", static_cast<long>(warps));
              char kernel[64];
              std::snprintf(kernel, sizeof kernel,
                            gemv ? "gemv_w4a16 persist=%ld ring=%ld%s"
                                 : (tensor_core_gemm ? "quant_gemm" : "dequant+cublasLt"),
                            static_cast<long>(persist), static_cast<long>(ring), tag);
              Tensor x = ctx.random(DType::kBF16, {m, lin.k});
              Tensor out = ctx.random(DType::kBF16, {m, lin.n});
              const auto [shape, bytes, fl] = matmul_row(m, lin, w_bytes);
              const int64_t launches = ctx.backend.quant_gemm_launches();
              const double us =
                  ctx.timer.per_call_ms(
                      [&](int i) {
                        ctx.backend.matmul(x, w[static_cast<size_t>(i % copies)], nullptr, out);
                      },
                      std::max(2 * copies, 8)) *
                  1e3;
              // The row's name must be what ran: the GEMM takes every call or none.
              if (tensor_core_gemm != (ctx.backend.quant_gemm_launches() > launches)) {
                std::fprintf(stderr, "int4 %s m=%ld: IB_QUANT_GEMM=%ld did not select %s\n",
                             lin.name, static_cast<long>(m), static_cast<long>(quant_gemm), kernel);
                std::exit(1);
              }
              char key[64];
              std::snprintf(
                  key, sizeof key,
                  gemv ? "m%ld_persist%ld_ring%ld%s" : (tensor_core_gemm ? "m%ld_gemm" : "m%ld"),
                  static_cast<long>(m), static_cast<long>(persist), static_cast<long>(ring), tag);
              layer_us[key] += us;
              ctx.report.add({"int4", lin.name, shape, kernel, us, bytes, fl});
            }
  }
  cuda::set_gemv_persist_blocks_per_sm(saved_persist);
  cuda::set_gemv_ring(saved_ring);
  cuda::set_gemv_int4_warps(saved_warps);
  ctx.backend.set_quant_gemm_rows(saved_quant_gemm);
  for (const auto& [key, us] : layer_us) {
    std::printf("w4a16 linears per layer, %s: %.1f us\n", key.c_str(), us);
    ctx.report.extra()["int4_layer_linears_us_" + key] = us;
  }
  ctx.release();
}

}  // namespace ib::bench
