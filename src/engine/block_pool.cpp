// BlockPool: a LIFO free list with a per-block in-use flag that catches double frees.
#include "engine/detail/block_pool.h"

#include <algorithm>

#include "core/assert.h"

namespace ib::detail {

BlockPool::BlockPool(int num_blocks) : in_use_(static_cast<size_t>(num_blocks), 0) {
  IB_ASSERT(num_blocks >= 0, "BlockPool: negative size");
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

bool BlockPool::allocate(int n, std::vector<int32_t>& table) {
  IB_ASSERT(n >= 0, "BlockPool::allocate: negative count");
  if (n > num_free()) return false;
  for (int i = 0; i < n; ++i) {
    const int32_t b = free_.back();
    free_.pop_back();
    in_use_[static_cast<size_t>(b)] = 1;
    table.push_back(b);
  }
  peak_used_ = std::max(peak_used_, num_used());
  return true;
}

void BlockPool::grow(int new_num_blocks) {
  const int old = num_blocks();
  IB_ASSERT(new_num_blocks >= old, "BlockPool::grow: cannot shrink");
  in_use_.resize(static_cast<size_t>(new_num_blocks), 0);
  // On top of the stack, lowest id last, so allocation continues in id order.
  for (int b = new_num_blocks - 1; b >= old; --b) free_.push_back(b);
}

void BlockPool::release(std::vector<int32_t>& table, size_t first) {
  release_range(table, first, table.size());
  table.clear();
}

void BlockPool::release_range(const std::vector<int32_t>& table, size_t first, size_t last) {
  IB_ASSERT(first <= last && last <= table.size(), "BlockPool::release_range: bad range");
  // Pushed in reverse so that a table released and re-allocated gets its blocks back in order.
  for (size_t i = last; i > first; --i) {
    const int32_t b = table[i - 1];
    IB_ASSERT(b >= 0 && b < num_blocks() && in_use_[static_cast<size_t>(b)] == 1,
              "BlockPool::release: block not in use (double free?)");
    in_use_[static_cast<size_t>(b)] = 0;
    free_.push_back(b);
  }
}

}  // namespace ib::detail
