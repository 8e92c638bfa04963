// Division by a runtime divisor fixed for a whole kernel launch (a paged cache's block size), as
// a multiply-high, an add and a shift (Granlund and Montgomery, "Division by invariant integers
// using multiplication", 1994): for 32-bit n < 2^31 and d >= 1, with l = ceil(log2 d) and
// m = floor(2^32 (2^l - d) / d) + 1, n / d = (mulhi(n, m) + n) >> l. A power of two gets m = 1,
// whose mulhi is 0: a shift. Host and device compute the same quotient (fast_div_test checks it
// against the division).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define IB_FAST_DIV_HD __host__ __device__
#else
#define IB_FAST_DIV_HD
#endif

namespace ib {

struct FastDiv {
  uint32_t magic = 1;  // m
  int shift = 0;       // l
  int divisor = 1;     // d

  // The divisor d >= 1 (checked by the caller: a cache's block size is positive).
  static FastDiv of(int d) {
    FastDiv f;
    f.divisor = d;
    while ((int64_t{1} << f.shift) < d) ++f.shift;
    const uint64_t pow = uint64_t{1} << f.shift;
    f.magic = static_cast<uint32_t>(
        ((pow - static_cast<uint64_t>(d)) << 32) / static_cast<uint64_t>(d) + 1);
    return f;
  }

  // n / d for 0 <= n < 2^31.
  IB_FAST_DIV_HD int div(int n) const {
    const auto u = static_cast<uint32_t>(n);
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(u, magic);
#else
    const auto hi = static_cast<uint32_t>((uint64_t{u} * magic) >> 32);
#endif
    return static_cast<int>((hi + u) >> shift);
  }
  // n % d for 0 <= n < 2^31, given q = div(n).
  IB_FAST_DIV_HD int mod(int n, int q) const {
    return n - q * divisor;
  }
};

}  // namespace ib
