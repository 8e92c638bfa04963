// A failing op becomes the backend's sticky device_status() instead of aborting: a launch the
// device refuses names its op; an asynchronous fault (a read of freed device memory) is caught
// at the next synchronization and says how to find the op; later ops are skipped, and the
// backend (with buffers still allocated) is destroyed cleanly. Its own binary: the fault ends
// the CUDA context for the whole process. Label gpu: skipped visibly without a CUDA device.
#include <gtest/gtest.h>

#include "backend/cuda/detail/test_support.h"

namespace ib::cuda {
namespace {

// Runs first: a refused launch does not break the context, so the next test can still fault.
TEST(CudaFault, ARefusedLaunchNamesItsOp) {
  IB_REQUIRE_CUDA();
  auto backend = CudaBackend::create(0, DType::kBF16, std::nullopt);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  CudaBackend& b = **backend;
  EXPECT_GT(b.copy_ceiling_bytes_per_s(), 1e11);  // measured at start-up
  auto out = b.alloc(size_t{1} << 20, MemoryTag::kActivations);
  ASSERT_TRUE(out.ok());
  // 2^31 rows: one block per row is beyond the grid limit, which the launch refuses.
  const Tensor ids(out->data(), DType::kI32, {int64_t{1} << 31});
  const Tensor rows(out->data(), DType::kBF16, {int64_t{1} << 31, 8});
  b.gather_rows(rows, ids, rows);
  const Status st = b.device_status();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("gather_rows"), std::string::npos) << st.error().message;
  b.fill_constant(out->view(DType::kF32, {16}), 1.0f);  // skipped
  EXPECT_EQ(b.device_status().error().message, st.error().message);
}

TEST(CudaFault, AnAsynchronousFaultBecomesTheStickyStatus) {
  IB_REQUIRE_CUDA();
  auto backend = CudaBackend::create(0, DType::kBF16, std::nullopt);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  CudaBackend& b = **backend;
  EXPECT_TRUE(b.device_status().ok());
  auto out = b.alloc(size_t{256} * 1024 * 2, MemoryTag::kActivations);
  ASSERT_TRUE(out.ok());
  const Tensor result = out->view(DType::kBF16, {256, 1024});  // (T, F)
  // gate_up (T, 2F) in 1 GiB of device memory that has been freed again.
  void* freed = nullptr;
  {
    auto scratch = b.alloc(size_t{1} << 30, MemoryTag::kOther);
    ASSERT_TRUE(scratch.ok());
    freed = scratch->data();
  }
  const Tensor gate_up(static_cast<char*>(freed) + (size_t{512} << 20), DType::kBF16, {256, 2048});
  b.silu_mul(gate_up, result);
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
