// WeightRef: a dense tensor is a dense weight that every matmul op takes; its bytes count every
// tensor it holds (scales and zero points too), which the engine's memory accounting uses.
#include "backend/weight.h"

#include <gtest/gtest.h>

#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace ib {
namespace {

TEST(WeightRef, CountsTheBytesOfEveryTensorItHolds) {
  std::vector<float> data(6 * 8), scales(6), zeros(6);
  WeightRef dense(Tensor(data.data(), DType::kF32, {6, 8}));
  EXPECT_EQ(dense.format, WeightFormat::kDense);
  EXPECT_EQ(dense.rows(), 6);
  EXPECT_EQ(dense.bytes(), 6u * 8u * 4u);
  EXPECT_EQ(std::string(weight_format_name(dense.format)), "dense");
  WeightRef grouped = dense;
  grouped.scales = Tensor(scales.data(), DType::kF32, {6});
  grouped.zeros = Tensor(zeros.data(), DType::kF32, {6});
  EXPECT_EQ(grouped.bytes(), (6u * 8u + 6u + 6u) * 4u);
}

TEST(WeightRef, TheCpuMatmulReadsADenseWeight) {
  CpuBackend backend(1);
  EXPECT_TRUE(backend.supports_weight_format(WeightFormat::kDense));
  EXPECT_EQ(backend.fused_decode_ops(), nullptr);
  std::vector<float> x = {1, 2, 3}, w = {1, 0, 0, 0, 1, 1}, out(2);
  auto xb = backend.alloc(x.size() * 4, MemoryTag::kActivations);
  auto wb = backend.alloc(w.size() * 4, MemoryTag::kWeights);
  auto ob = backend.alloc(out.size() * 4, MemoryTag::kActivations);
  ASSERT_TRUE(xb.ok() && wb.ok() && ob.ok());
  const Tensor xt = xb->view(DType::kF32, {1, 3});
  const WeightRef wr(wb->view(DType::kF32, {2, 3}));
  const Tensor ot = ob->view(DType::kF32, {1, 2});
  backend.copy_from_host(xt, x.data(), DType::kF32);
  backend.copy_from_host(wr.data, w.data(), DType::kF32);
  backend.matmul(xt, wr, nullptr, ot);
  backend.copy_to_host(ot, out.data());
  EXPECT_EQ(out, (std::vector<float>{1, 5}));
}

}  // namespace
}  // namespace ib
