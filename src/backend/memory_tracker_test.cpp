// MemoryTracker: the cap's admission rules, including a reallocation checked before anything is
// freed (admit_after_free) and the query that counts nothing (fits).
#include "backend/memory_tracker.h"

#include <gtest/gtest.h>

namespace ib {
namespace {

TEST(MemoryTracker, AdmitAfterFreeCountsTheFreedBytesAndRefusals) {
  MemoryTracker t;
  t.set_limit_bytes(1000);
  t.on_alloc(0x100, 600, MemoryTag::kKvCache);
  EXPECT_FALSE(t.admit(500));                   // 600 + 500 > 1000
  EXPECT_TRUE(t.admit_after_free(600, 1000));   // the 600 replaced: exactly the cap
  EXPECT_FALSE(t.admit_after_free(600, 1001));  // one byte beyond it
  EXPECT_TRUE(t.admit_after_free(200, 600));    // 400 kept + 600
  const MemorySnapshot s = t.snapshot();
  EXPECT_EQ(s.num_refused, 2);
  EXPECT_EQ(s.allocated_bytes, 600);  // admission allocates nothing
  EXPECT_EQ(s.num_allocs, 1);
}

TEST(MemoryTracker, FitsIsAQueryThatCountsNothing) {
  MemoryTracker t;
  EXPECT_TRUE(t.fits(int64_t{1} << 50));  // no cap: everything fits
  t.set_limit_bytes(1000);
  t.on_alloc(0x100, 600, MemoryTag::kWeights);
  EXPECT_TRUE(t.fits(400));
  EXPECT_FALSE(t.fits(401));
  EXPECT_EQ(t.snapshot().num_refused, 0);
  t.on_free(0x100, 600, MemoryTag::kWeights);
  EXPECT_TRUE(t.fits(1000));
}

}  // namespace
}  // namespace ib
