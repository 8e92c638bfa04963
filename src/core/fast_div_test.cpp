#include "core/fast_div.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace ib {
namespace {

TEST(FastDiv, EqualsTheDivisionForEveryBlockSizeUpTo4096) {
  std::vector<int> numerators;
  for (int n = 0; n < 70000; ++n) numerators.push_back(n);
  for (int64_t n = 1; n < (int64_t{1} << 31); n = n * 3 + 1) {
    numerators.push_back(static_cast<int>(n));
    numerators.push_back(static_cast<int>(n - 1));
  }
  numerators.push_back(0x7fffffff);
  numerators.push_back(0x7ffffffe);
  for (int d = 1; d <= 4096; ++d) {
    const FastDiv f = FastDiv::of(d);
    for (const int n : numerators) {
      const int q = f.div(n);
      ASSERT_EQ(q, n / d) << n << " / " << d;
      ASSERT_EQ(f.mod(n, q), n % d) << n << " % " << d;
    }
  }
}

TEST(FastDiv, LargeDivisorsAtTheirMultiples) {
  for (const int d : {4097, 65535, 65536, 100003, 1 << 20, (1 << 30) + 1, 0x7fffffff}) {
    const FastDiv f = FastDiv::of(d);
    for (int64_t k = 0; k * d < (int64_t{1} << 31); k += 1 + k / 7) {
      for (const int64_t n : {k * d - 1, k * d, k * d + 1}) {
        if (n < 0 || n >= (int64_t{1} << 31)) continue;
        ASSERT_EQ(f.div(static_cast<int>(n)), n / d) << n << " / " << d;
      }
    }
  }
}

TEST(FastDiv, APowerOfTwoIsAShift) {
  for (int l = 0; l < 31; ++l) {
    const FastDiv f = FastDiv::of(1 << l);
    EXPECT_EQ(f.shift, l);
    EXPECT_EQ(f.magic, 1u);
  }
}

}  // namespace
}  // namespace ib
