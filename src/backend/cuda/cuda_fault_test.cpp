// A device fault during an op becomes the backend's sticky device_status() instead of aborting:
// the message names CUDA's error and how to find the op, later ops are skipped, and the backend
// (with buffers still allocated) is destroyed cleanly. Its own binary: the fault ends the CUDA
// context for the whole process. Label gpu: skipped visibly without a CUDA device.
#include <gtest/gtest.h>

#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

TEST(CudaFault, AnAsynchronousFaultBecomesTheStickyStatus) {
  IB_REQUIRE_CUDA();
  auto backend = CudaBackend::create(0, DType::kBF16, std::nullopt);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  CudaBackend& b = **backend;
  EXPECT_TRUE(b.device_status().ok());
  EXPECT_GT(b.copy_ceiling_bytes_per_s(), 1e11);  // measured at start-up
  auto out = b.alloc(size_t{256} * 1024 * 2, MemoryTag::kActivations);
  ASSERT_TRUE(out.ok());
  const Tensor result = out->view(DType::kBF16, {256, 1024});  // (T, F)
  // gate_up (T, 2F) at an address no allocation covers: the kernel faults asynchronously.
  const Tensor bogus(reinterpret_cast<void*>(uintptr_t{1} << 40), DType::kBF16, {256, 2048});
  b.silu_mul(bogus, result);
  b.synchronize();
  const Status st = b.device_status();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("CUDA error"), std::string::npos) << st.error().message;
  EXPECT_NE(st.error().message.find("IB_CUDA_DEBUG_SYNC"), std::string::npos) << st.error().message;
  // Later ops are skipped and the first error is kept.
  b.fill_constant(result, 1.0f);
  std::vector<uint16_t> host(static_cast<size_t>(result.numel()));
  b.copy_to_host(result, host.data());
  EXPECT_EQ(b.device_status().error().message, st.error().message);
  out->reset();  // freeing after the fault neither aborts nor replaces the first error
  EXPECT_EQ(b.device_status().error().message, st.error().message);
}

}  // namespace
}  // namespace ib::cuda
