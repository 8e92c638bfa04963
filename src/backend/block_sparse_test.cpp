#include "backend/block_sparse.h"

#include <gtest/gtest.h>

#include <vector>

namespace ib {
namespace {

// The keys a query sees, by brute force over every key before it.
std::vector<int> brute_force_keys(const BlockSparse& b, int q_pos) {
  std::vector<int> keys;
  for (int k = 0; k <= q_pos; ++k) {
    const int qb = q_pos / b.block_size, kb = k / b.block_size;
    if (qb - kb < b.local_blocks || (kb + 1) % b.vert_stride == 0) keys.push_back(k);
  }
  return keys;
}

// block_sparse_num_keys and block_sparse_key enumerate exactly the keys the pattern keeps, in
// ascending order, for patterns from dense (stride 1) to a band of one block.
TEST(BlockSparse, EnumeratesTheKeptKeysInOrder) {
  const BlockSparse patterns[] = {{4, 2, 3}, {3, 1, 2}, {8, 3, 1}, {64, 16, 8}, {5, 1, 7}};
  for (const BlockSparse& b : patterns) {
    for (int q = 0; q < 40 * b.block_size; q += q < 200 ? 1 : 7) {
      const std::vector<int> want = brute_force_keys(b, q);
      ASSERT_EQ(block_sparse_num_keys(b, q), static_cast<int>(want.size()))
          << "block " << b.block_size << " local " << b.local_blocks << " stride " << b.vert_stride
          << " query " << q;
      for (int i = 0; i < static_cast<int>(want.size()); ++i) {
        ASSERT_EQ(block_sparse_key(b, q, i), want[static_cast<size_t>(i)]) << "query " << q;
        ASSERT_TRUE(block_sparse_keeps(b, q, want[static_cast<size_t>(i)]));
      }
    }
  }
}

// Phi-3-small's pattern (blocks of 64, a band of 16, every 8th block) at 16,384 tokens: the
// band's 16 blocks plus 30 strided blocks below it, 46 of 256.
TEST(BlockSparse, Phi3SmallPatternAt16k) {
  const BlockSparse b{64, 16, 8};
  EXPECT_EQ(block_sparse_num_keys(b, 16383), 46 * 64);
  EXPECT_EQ(block_sparse_key(b, 16383, 0), 7 * 64);  // block 7 is the first strided one
  EXPECT_FALSE(block_sparse_keeps(b, 16383, 0));
  EXPECT_TRUE(block_sparse_keeps(b, 16383, 16383 - 16 * 64 + 64));  // the band's first block
}

}  // namespace
}  // namespace ib
