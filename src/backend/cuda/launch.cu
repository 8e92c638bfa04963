// IB_SMEM_CARVEOUT: the shared-memory carve-out preference every launch_kernel launch sets on
// its kernel (detail/carveout.h, detail/pdl.cuh).
#include <cuda_runtime.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "backend/cuda/detail/carveout.h"
#include "backend/cuda/detail/check.h"

namespace ib::cuda {
namespace {

std::atomic<int> g_carveout{-1};

}  // namespace

void set_smem_carveout(int percent) {
  g_carveout.store(percent, std::memory_order_relaxed);
}

int smem_carveout() {
  return g_carveout.load(std::memory_order_relaxed);
}

void apply_smem_carveout(const void* kernel) {
  const int percent = smem_carveout();
  static std::mutex mutex;
  static std::unordered_map<const void*, int> applied;  // each kernel's preference as set
  const std::lock_guard<std::mutex> lock(mutex);
  const auto it = applied.find(kernel);
  if (it != applied.end() && it->second == percent) return;
  IB_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent),
      "IB_SMEM_CARVEOUT");
  applied[kernel] = percent;
}

}  // namespace ib::cuda
