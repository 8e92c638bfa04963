// BlockPool accounting: allocation order, refusal without side effects, peak, double free, and a
// randomized allocate/release sequence that must end with every block free.
#include "engine/detail/block_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "core/rng.h"

namespace ib::detail {
namespace {

TEST(BlockPool, AllocatesInOrderAndRefusesWithoutSideEffects) {
  BlockPool pool(5);
  std::vector<int32_t> a, b;
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  EXPECT_FALSE(pool.allocate(3, b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(pool.num_free(), 2);
  ASSERT_TRUE(pool.allocate(2, b));
  EXPECT_EQ(pool.num_used(), 5);
  EXPECT_EQ(pool.peak_used(), 5);
  pool.release(a);
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(pool.num_free(), 3);
  // Released blocks come back in their original order.
  ASSERT_TRUE(pool.allocate(3, a));
  EXPECT_EQ(a, (std::vector<int32_t>{0, 1, 2}));
  pool.release(a);
  pool.release(b);
  EXPECT_EQ(pool.num_free(), 5);
  EXPECT_EQ(pool.peak_used(), 5);
}

TEST(BlockPool, ReleasesARangeThenTheRestOfATable) {
  BlockPool pool(6);
  std::vector<int32_t> table;
  ASSERT_TRUE(pool.allocate(5, table));  // 0 1 2 3 4
  pool.release_range(table, 0, 2);       // a window's blocks: the ids stay in the table
  EXPECT_EQ(table.size(), 5u);
  EXPECT_EQ(pool.num_used(), 3);
  std::vector<int32_t> other;
  ASSERT_TRUE(pool.allocate(2, other));  // the freed blocks come back first
  EXPECT_EQ(other, (std::vector<int32_t>{0, 1}));
  pool.release(table, 2);  // the rest: 2 3 4
  EXPECT_TRUE(table.empty());
  EXPECT_EQ(pool.num_used(), 2);
  EXPECT_DEATH(pool.release_range(other, 1, 3), "bad range");
}

TEST(BlockPool, DoubleFreeAborts) {
  BlockPool pool(2);
  std::vector<int32_t> a;
  ASSERT_TRUE(pool.allocate(1, a));
  std::vector<int32_t> copy = a;
  pool.release(a);
  EXPECT_DEATH(pool.release(copy), "double free");
}

TEST(BlockPool, RandomizedTablesNeverShareBlocksAndNeverLeak) {
  Rng rng(7);
  BlockPool pool(64);
  std::vector<std::vector<int32_t>> tables(10);
  for (int op = 0; op < 5000; ++op) {
    auto& t = tables[static_cast<size_t>(rng.uniform_int(0, 9))];
    if (rng.uniform() < 0.6) {
      const int n = static_cast<int>(rng.uniform_int(0, 6));
      const int free_before = pool.num_free();
      const bool ok = pool.allocate(n, t);
      EXPECT_EQ(ok, n <= free_before);
    } else {
      pool.release(t);
    }
    std::set<int32_t> seen;
    size_t held = 0;
    for (const auto& table : tables) {
      held += table.size();
      seen.insert(table.begin(), table.end());
    }
    ASSERT_EQ(seen.size(), held) << "a block is in two tables";
    ASSERT_EQ(static_cast<int>(held), pool.num_used());
  }
  for (auto& t : tables) pool.release(t);
  EXPECT_EQ(pool.num_free(), 64);
}

}  // namespace
}  // namespace ib::detail
