// IB_ASSERT: a broken invariant aborts with file:line and context. Never used for user input.
#pragma once

namespace ib::detail {
[[noreturn]] void assert_fail(const char* cond, const char* file, int line, const char* context);
}

#define IB_ASSERT(cond, context)                                          \
  do {                                                                    \
    if (!(cond)) ::ib::detail::assert_fail(#cond, __FILE__, __LINE__, (context)); \
  } while (0)
