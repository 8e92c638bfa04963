// The op benchmark's icache section: what running code an SM has not run before costs. At small
// batches each SM runs one block of a kernel once, so every byte of the path it takes is fetched
// cold (bench/NOTES.md, "The attention form's cost is its code"). Kernels of straight-line FMAs
// (icache_kernels.cu) of 16 to 512 rounds, one block of 4 warps an SM, timed warm (the same kernel
// back to back) and cold (each launch after an evictor kernel of more code than an SM caches,
// whose own time is subtracted), with the body run once and twice: warm x2 - warm x1 is the
// body's issue time, cold x1 - warm x1 the fetch. Sizes in bytes: python3
// bench/gpu/ptxas_regs.py --sizes bench/gpu/icache_kernels.cu.
#include <functional>
#include <string>

#include "icache_kernels.h"
#include "ops_bench.h"

namespace ib::bench {

void bench_icache(BenchContext& ctx) {
  cudaStream_t stream = ctx.backend.stream();
  const int sms = ctx.backend.num_sms();
  float* sink = ctx.allocate(DType::kF32, {128}).as<float>();
  const std::string shape = std::to_string(sms) + " blocks x 4 warps";
  const auto time_us = [&](const std::function<void(int)>& fn, int inner) {
    return ctx.timer.per_call_ms(fn, inner) * 1e3;
  };
  const double evict_us = time_us([&](int) { launch_code_evictor(sms, sink, stream); }, 16);
  ctx.report.add({"icache", "evictor_r1024", shape, "cold x1", evict_us, 0, 0});
  for (int i = 0; i < code_kernel_count(); ++i) {
    const std::string op = "code_r" + std::to_string(code_kernel_rounds(i));
    for (const int reps : {1, 2}) {
      const double warm = time_us([&](int) { launch_code_kernel(i, sms, reps, sink, stream); }, 32);
      const double cold = time_us(
                              [&](int) {
                                launch_code_evictor(sms, sink, stream);
                                launch_code_kernel(i, sms, reps, sink, stream);
                              },
                              16) -
                          evict_us;
      const std::string x = " x" + std::to_string(reps);
      ctx.report.add({"icache", op, shape, "warm" + x, warm, 0, 0});
      ctx.report.add({"icache", op, shape, "cold" + x, cold, 0, 0});
    }
  }
  ctx.release();
}

}  // namespace ib::bench
