// What the vision CUDA tests share: the tolerance of a CUDA result against the CPU's in each
// activation dtype (relative L2), and that distance.
#pragma once

#include <cmath>
#include <vector>

#include "core/assert.h"
#include "core/dtype.h"

namespace ib::vision_cuda_test {

// fp32 1e-4; fp16 1e-2; bf16 3e-2 (a whole tower or model of roundings).
inline double tolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 1e-4;
    case DType::kF16:
      return 1e-2;
    default:
      return 3e-2;
  }
}

// ||got - want|| / ||want||; infinity where got holds a NaN or an infinity.
inline double rel_l2(const std::vector<float>& got, const std::vector<float>& want) {
  IB_ASSERT(got.size() == want.size(), "rel_l2: sizes differ");
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    num += (double{got[i]} - want[i]) * (double{got[i]} - want[i]);
    den += double{want[i]} * want[i];
  }
  return std::sqrt(num / den);
}

}  // namespace ib::vision_cuda_test
