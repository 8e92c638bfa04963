// Test helpers for the flag-synchronised kernel pairs (IB_QUANT_SYNC: a quantize or norm kernel
// and the quantized GEMV after it; detail/flag_sync.cuh): a process-wide switch restored on scope
// exit, and the check that the flags change no result.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/detail/kernels.h"
#include "backend/cuda/detail/quant_switches.h"
#include "backend/cuda/detail/test_support.h"

namespace ib::cuda::testing {

// A process-wide switch (get, set) restored when the guard goes out of scope.
struct SavedSwitch {
  SavedSwitch(int (*get)(), void (*set)(int)) : set_(set), saved_(get()) {}
  ~SavedSwitch() { set_(saved_); }
  SavedSwitch(const SavedSwitch&) = delete;
  SavedSwitch& operator=(const SavedSwitch&) = delete;
  void (*set_)(int);
  int saved_;
};

// IB_QUANT_SYNC changes no result: for 1 and 8 tokens, the quantized matmul (N 1,024, K 4,096),
// the fused SwiGLU with its norm (F 512) and the residual add (K 512 into 4,096) at
// IB_QUANT_SYNC 1 and 2 equal to 0 bit for bit, eagerly and from one graph replayed three times;
// each of the three GEMVs handed a flag set where the format runs the decode GEMV (W4A16 with
// groups of 64 or act-order takes the dequantizing path: none); every flag back to 0 after each
// pass. make(n, k): a WeightPair (n, k) of the format under test.
template <typename MakeWeight>
void expect_quant_sync_changes_no_result(Twin& twin, Rng& rng, const MakeWeight& make,
                                         const std::string& what) {
  const SavedSwitch guard(quant_sync, set_quant_sync);
  const int64_t n = 1024, k = 4096, f = 512;
  const Pair gain = twin.floats({k}, random_floats(rng, k, 0.2f, 2.0f));
  const WeightPair w = make(n, k), wgu = make(2 * f, k), wdown = make(k, f);
  const std::vector<unsigned> zeros(
      size_t{CudaBackend::kQuantSyncSets} * CudaBackend::kQuantSyncWords, 0u);
  for (const int64_t m : {1, 8}) {
    const Pair x = twin.floats({m, k}, random_floats(rng, m * k, -1.5f, 1.5f));
    const std::vector<float> res0 = random_floats(rng, m * k, -1.0f, 1.0f);
    const Pair residual = twin.floats({m, k}, res0);
    const Pair out = twin.output({m, n});
    const Pair act = twin.output({m, f});
    CudaBackend& gpu = twin.gpu();
    const auto ops = [&] {
      gpu.matmul(x.gpu, w.gpu, nullptr, out.gpu);
      gpu.rms_matmul_swiglu(x.gpu, &gain.gpu, wgu.gpu, 1e-5f, act.gpu);
      gpu.matmul_add(act.gpu, wdown.gpu, residual.gpu);
    };
    const auto reset = [&] {
      gpu.copy_from_host(residual.gpu, res0.data(), DType::kF32);
      gpu.synchronize();
    };
    const auto results = [&] {
      EXPECT_TRUE(gpu.device_status().ok());
      return std::tuple{twin.gpu_floats(out.gpu), twin.gpu_floats(act.gpu),
                        twin.gpu_floats(residual.gpu)};
    };
    set_quant_sync(0);
    reset();
    ops();
    const auto want = results();
    for (const int mode : {1, 2}) {
      set_quant_sync(mode);
      const std::string at = what + " m=" + std::to_string(m) + " sync " + std::to_string(mode);
      const int64_t pairs = gpu.quant_sync_pairs();
      reset();
      ops();
      EXPECT_EQ(results(), want) << at << " eager";
      EXPECT_EQ(gpu.quant_sync_pairs() - pairs, gemv_supported(x.gpu, w.gpu, out.gpu) ? 3 : 0)
          << at;
      EXPECT_EQ(gpu.quant_sync_words(), zeros) << at << " eager";
      reset();
      replay_in_graph(twin, ops, 3, [&](int replay) {
        EXPECT_EQ(results(), want) << at << " replay " << replay;
        EXPECT_EQ(gpu.quant_sync_words(), zeros) << at << " replay " << replay;
        reset();
      });
    }
  }
}

}  // namespace ib::cuda::testing
