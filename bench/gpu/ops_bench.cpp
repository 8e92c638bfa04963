// GPU op benchmark: times every CUDA op at Llama-3-8B decode and prefill shapes (bf16) with CUDA
// events over graph replays, prints achieved GB/s and TFLOP/s against the measured ceilings,
// and estimates the decode / prefill step from the per-op times.
// Usage: ib_ops_bench [result.json]
#include "ops_bench.h"

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>

#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/switches.h"
#include "bench_kernels.h"

namespace ib::bench {

Tensor BenchContext::allocate(DType dtype, std::initializer_list<int64_t> shape) {
  Tensor probe(nullptr, dtype, shape);
  auto buf = backend.alloc(probe.bytes(), MemoryTag::kOther);
  IB_ASSERT(buf.ok(), "bench allocation failed");
  buffers.push_back(std::move(buf).value());
  return buffers.back().view(dtype, shape);
}

Tensor BenchContext::random(DType dtype, std::initializer_list<int64_t> shape, float scale) {
  Tensor t = allocate(dtype, shape);
  backend.fill_uniform(t, 42, buffers.size(), scale);
  return t;
}

Tensor BenchContext::zeros_i32(std::initializer_list<int64_t> shape) {
  Tensor probe(nullptr, DType::kI32, shape);
  auto buf = backend.alloc(probe.bytes(), MemoryTag::kOther);
  IB_ASSERT(buf.ok(), "bench allocation failed");
  buffers.push_back(std::move(buf).value());
  return buffers.back().view(DType::kI32, shape);
}

Tensor BenchContext::upload_i32(std::initializer_list<int64_t> shape,
                                const std::vector<int32_t>& values) {
  Tensor t = zeros_i32(shape);
  backend.copy_from_host(t, values.data(), DType::kI32);
  return t;
}

double measure_copy_ceiling(BenchContext& ctx) {
  const int64_t n = int64_t{1} << 29;  // 1 GiB of bf16 each way
  Tensor src = ctx.random(DType::kBF16, {n});
  Tensor dst = ctx.random(DType::kBF16, {n});
  Tensor sink = ctx.zeros_i32({1});
  const double bytes = static_cast<double>(src.bytes());
  const cudaStream_t stream = ctx.backend.stream();
  const int sms = ctx.backend.num_sms();
  double ms = ctx.timer.per_call_ms(
      [&](int) {
        IB_CUDA_CHECK(
            cudaMemcpyAsync(dst.data, src.data, src.bytes(), cudaMemcpyDeviceToDevice, stream),
            "bench copy");
      },
      4, 9);
  ctx.report.add({"ceiling", "d2d_copy", "1 GiB", "memcpy", ms * 1e3, 2 * bytes, 0});
  ms = ctx.timer.per_call_ms(
      [&](int) { launch_copy(src.data, dst.data, src.bytes(), sms, stream); }, 4, 9);
  ctx.report.add({"ceiling", "d2d_copy", "1 GiB", "kernel", ms * 1e3, 2 * bytes, 0});
  const double copy_tbs = 2 * bytes / (ms * 1e-3) / 1e12;
  ms = ctx.timer.per_call_ms(
      [&](int) { launch_read(src.data, src.bytes(), sink.as<unsigned>(), sms, stream); }, 4, 9);
  ctx.report.add({"ceiling", "read", "1 GiB", "kernel", ms * 1e3, bytes, 0});
  ctx.report.extra()["read_tb_per_s_measured"] = bytes / (ms * 1e-3) / 1e12;
  ctx.release();
  return copy_tbs;
}

// Brings the clocks up before anything is timed: ~0.3 s of large GEMMs.
bool listed(std::string_view list, std::string_view name) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    if (list.substr(0, comma) == name) return true;
    list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
  }
  return false;
}

void warm_up(BenchContext& ctx) {
  Tensor a = ctx.random(DType::kBF16, {8192, 8192});
  Tensor b = ctx.random(DType::kBF16, {8192, 8192});
  Tensor c = ctx.random(DType::kBF16, {8192, 8192});
  for (int i = 0; i < 200; ++i) ctx.backend.matmul(a, b, nullptr, c);
  ctx.backend.synchronize();
  ctx.release();
}

namespace {

struct Linear {
  const char* name;
  int64_t n, k;
  bool f32_out;
};
const Linear kLinears[] = {{"qkv", (kHeads + 2 * kKvHeads) * kHeadDim, kHidden, false},
                           {"o", kHidden, kHeads* kHeadDim, false},
                           {"gate_up", 2 * kFfn, kHidden, false},
                           {"down", kHidden, kFfn, false},
                           {"lm_head", kVocab, kHidden, true}};

double flops(int64_t m, int64_t n, int64_t k) {
  return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
}

std::string shape_str(int64_t m, int64_t n, int64_t k) {
  return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
}

}  // namespace

void bench_gemm_decode(BenchContext& ctx) {
  const int64_t ms_list[] = {1, 2, 4, 8, 16, 32};
  // Per batch: the four per-layer linears through the GEMV, through cuBLASLt, and each at its
  // faster path.
  std::map<int64_t, std::array<double, 4>> layer_us;
  for (const Linear& lin : kLinears) {
    const double w_bytes = static_cast<double>(lin.n * lin.k * 2);
    // Enough weight copies that a replay streams >= 512 MB: no L2 reuse between calls.
    const int copies = static_cast<int>(std::max(1.0, std::ceil(512e6 / w_bytes)));
    std::vector<Tensor> w;
    for (int c = 0; c < copies; ++c)
      w.push_back(ctx.random(DType::kBF16, {lin.n, lin.k}, 1.0f / std::sqrt(float(lin.k))));
    for (const int64_t m : ms_list) {
      Tensor x = ctx.random(DType::kBF16, {m, lin.k});
      Tensor out = ctx.random(lin.f32_out ? DType::kF32 : DType::kBF16, {m, lin.n});
      const double bytes = w_bytes + static_cast<double>(m * lin.k * 2) +
                           static_cast<double>(m * lin.n * (lin.f32_out ? 4 : 2));
      double best = 1e30, gemv_us = 0, lt_us = 0;
      ctx.backend.set_gemv_max_weight_bytes(INT64_MAX);
      for (const int max_m : {cuda::kGemvMaxM, 0}) {
        ctx.backend.set_gemv_max_m(max_m);
        const double ms = ctx.timer.per_call_ms(
            [&](int i) { ctx.backend.matmul(x, w[static_cast<size_t>(i % copies)], nullptr, out); },
            std::max(2 * copies, 8));
        const double us = ms * 1e3;
        (max_m ? gemv_us : lt_us) = us;
        best = std::min(best, us);
        ctx.report.add({"decode", lin.name, shape_str(m, lin.n, lin.k), max_m ? "gemv" : "cublasLt",
                        us, bytes, flops(m, lin.n, lin.k)});
      }
      // The backend's own choice (defaults restored): what the engine gets.
      ctx.backend.set_gemv_max_m(8);
      ctx.backend.set_gemv_max_weight_bytes(int64_t{64} << 20);
      const double auto_us =
          ctx.timer.per_call_ms(
              [&](int i) {
                ctx.backend.matmul(x, w[static_cast<size_t>(i % copies)], nullptr, out);
              },
              std::max(2 * copies, 8)) *
          1e3;
      ctx.report.add({"decode", lin.name, shape_str(m, lin.n, lin.k), "auto", auto_us, bytes,
                      flops(m, lin.n, lin.k)});
      if (!lin.f32_out) {
        layer_us[m][0] += gemv_us;
        layer_us[m][1] += lt_us;
        layer_us[m][2] += best;
        layer_us[m][3] += auto_us;
      }
      if (m == 1) {
        for (int v = 0; v < gemv_variant_count(); ++v) {
          const double us = ctx.timer.per_call_ms(
                                [&](int i) {
                                  launch_gemv_variant(v, x, w[static_cast<size_t>(i % copies)], out,
                                                      ctx.backend.stream());
                                },
                                std::max(2 * copies, 8)) *
                            1e3;
          ctx.report.add({"variant", lin.name, shape_str(m, lin.n, lin.k), gemv_variant_name(v), us,
                          bytes, flops(m, lin.n, lin.k)});
        }
      }
      ctx.times[m][lin.name] = auto_us;
    }
  }
  for (const auto& [m, us] : layer_us) {
    std::printf(
        "decode linears per layer, M = %ld: gemv %.1f us, cublasLt %.1f us, best %.1f us, "
        "auto %.1f us\n",
        static_cast<long>(m), us[0], us[1], us[2], us[3]);
    ctx.report.extra()["layer_linears_us_m" + std::to_string(m)] = {
        {"gemv", us[0]}, {"cublasLt", us[1]}, {"best", us[2]}, {"auto", us[3]}};
  }
  ctx.release();
}

void bench_gemm_prefill(BenchContext& ctx) {
  for (const int64_t m : {512, 2048, 4096}) {
    for (const Linear& lin : kLinears) {
      if (lin.f32_out) continue;  // logits are computed for the last token of each prompt only
      Tensor w = ctx.random(DType::kBF16, {lin.n, lin.k}, 1.0f / std::sqrt(float(lin.k)));
      Tensor x = ctx.random(DType::kBF16, {m, lin.k});
      Tensor out = ctx.random(DType::kBF16, {m, lin.n});
      const double ms =
          ctx.timer.per_call_ms([&](int) { ctx.backend.matmul(x, w, nullptr, out); }, 4, 9);
      const double bytes = static_cast<double>((lin.n * lin.k + m * lin.k + m * lin.n) * 2);
      ctx.report.add({"prefill", lin.name, shape_str(m, lin.n, lin.k), "cublasLt", ms * 1e3, bytes,
                      flops(m, lin.n, lin.k)});
      ctx.times[m][lin.name] = ms * 1e3;
      ctx.release();
    }
  }
}

}  // namespace ib::bench

namespace {

// Per-step estimates from the per-op times (32 layers + the head), printed and stored.
void step_estimates(ib::bench::BenchContext& ctx) {
  using namespace ib::bench;
  auto& t = ctx.times;
  auto layer_us = [&](int64_t m, const std::string& attn) {
    auto& r = t[m];
    return r["qkv"] + r["o"] + r["gate_up"] + r["down"] + 2 * r["add_rms_norm"] + r["rope"] +
           r[attn] + r["silu_mul"];
  };
  for (const int64_t m : {int64_t{1}, int64_t{8}}) {
    const double us = kLayers * layer_us(m, "attention_ctx160") + t[m]["lm_head"] +
                      t[m]["rms_norm"] + t[m]["sample"];
    const double tok_s = static_cast<double>(m) / (us * 1e-6);
    std::printf("decode step estimate, batch %ld, context 160: %.3f ms -> %.0f tok/s\n",
                static_cast<long>(m), us / 1e3, tok_s);
    ctx.report.extra()["decode_step_ms_batch" + std::to_string(m)] = us / 1e3;
    ctx.report.extra()["decode_tok_per_s_batch" + std::to_string(m)] = tok_s;
  }
  const double prefill_us = kLayers * layer_us(4096, "attention_prefill_8x512");
  std::printf("prefill estimate, 8 x 512 tokens: %.2f ms -> %.0f tok/s\n", prefill_us / 1e3,
              4096 / (prefill_us * 1e-6));
  ctx.report.extra()["prefill_8x512_ms"] = prefill_us / 1e3;
  ctx.report.extra()["prefill_8x512_tok_per_s"] = 4096 / (prefill_us * 1e-6);
  const double ttft_us = kLayers * layer_us(2048, "attention_prefill_1x2048") + t[1]["lm_head"];
  std::printf("prefill estimate, 1 x 2048 tokens (TTFT, GPU only): %.2f ms\n", ttft_us / 1e3);
  ctx.report.extra()["prefill_1x2048_ms"] = ttft_us / 1e3;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ib;
  auto created = cuda::CudaBackend::create(0, DType::kBF16, std::nullopt);
  if (!created.ok()) {
    std::fprintf(stderr, "ib_ops_bench: %s\n", created.error().message.c_str());
    return 2;
  }
  cuda::CudaBackend& backend = **created;
  // The kernel switches the environment sets (IB_GEMV_RING, ...; backend/kernel_switches.h), as
  // the backend factory applies them.
  const auto switches = cuda::read_cuda_switches();
  if (!switches.ok()) {
    std::fprintf(stderr, "ib_ops_bench: %s\n", switches.error().message.c_str());
    return 2;
  }
  if (const Status applied = cuda::apply_cuda_switches(*switches, backend); !applied.ok()) {
    std::fprintf(stderr, "ib_ops_bench: %s\n", applied.error().message.c_str());
    return 1;
  }
  const DeviceInfo info = backend.device_info();
  std::printf("device: %s, %d SMs, %.1f GiB\n", info.name.c_str(), backend.num_sms(),
              static_cast<double>(info.total_bytes) / (1 << 30));
  bench::GraphTimer timer(backend.stream());
  bench::Report report;
  bench::BenchContext ctx{backend, timer, report, {}, {}};
  bench::warm_up(ctx);
  const double copy_tbs = bench::measure_copy_ceiling(ctx);
  std::printf("measured copy ceiling: %.2f TB/s (reference %.2f)\n", copy_tbs,
              bench::kCopyCeilingTBs);
  report.extra()["device"] = info.name;
  report.extra()["copy_tb_per_s_measured"] = copy_tbs;
  // IB_OPS_SECTIONS (comma-separated: gemm_decode, gemm_prefill, gemm_fp8, attention,
  // small_ops, sampling) runs only those; the step estimates need all but gemm_fp8. decode_mma
  // (the tensor-core decode attention over batches and contexts), gemm_algos (the cuBLASLt
  // heuristic's candidates at a continuous run's GEMM shapes) and lora (the LoRA decode shrinks
  // alone, ops_bench_lora.cpp) and icache (cold code against warm, ops_bench_icache.cpp) run
  // only when listed.
  const char* only = std::getenv("IB_OPS_SECTIONS");
  const bool all = only == nullptr || *only == '\0';
  const auto want = [&](const char* name) { return all || bench::listed(only, name); };
  if (want("gemm_decode")) bench::bench_gemm_decode(ctx);
  if (want("gemm_prefill")) bench::bench_gemm_prefill(ctx);
  if (want("gemm_fp8")) bench::bench_gemm_fp8(ctx);
  if (want("gemm_int4")) bench::bench_gemm_int4(ctx);
  if (want("attention")) bench::bench_attention(ctx);
  if (only != nullptr && bench::listed(only, "decode_mma")) bench::bench_decode_mma(ctx);
  if (only != nullptr && bench::listed(only, "gemm_algos")) bench::bench_gemm_algos(ctx);
  if (only != nullptr && bench::listed(only, "lora")) bench::bench_lora(ctx);
  if (only != nullptr && bench::listed(only, "icache")) bench::bench_icache(ctx);
  if (want("small_ops")) bench::bench_small_ops(ctx);
  if (want("sampling")) bench::bench_sampling(ctx);
  if (all) step_estimates(ctx);
  if (argc > 1) {
    std::ofstream(argv[1]) << report.json().dump(2) << "\n";
    std::printf("wrote %s\n", argv[1]);
  }
  return 0;
}
