#include "core/assert.h"

#include <cstdio>
#include <cstdlib>

namespace ib::detail {
void assert_fail(const char* cond, const char* file, int line, const char* context) {
  std::fprintf(stderr, "inferbench: internal error at %s:%d: %s (%s)\n", file, line, cond,
               context ? context : "");
  std::fflush(stderr);
  std::abort();
}
}  // namespace ib::detail
