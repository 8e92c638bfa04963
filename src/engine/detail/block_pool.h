// Internal to engine/: the KV-cache block pool. Hands out block ids [0, num_blocks) to
// per-sequence block tables and takes them back; counts used and peak blocks. LIFO free list, so
// allocation order is deterministic (the first blocks handed out are 0, 1, 2, ...).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ib::detail {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(in_use_.size()); }
  int num_free() const { return static_cast<int>(free_.size()); }
  int num_used() const { return num_blocks() - num_free(); }
  int peak_used() const { return peak_used_; }

  // Appends n blocks to table. Returns false, changing nothing, when fewer than n are free.
  bool allocate(int n, std::vector<int32_t>& table);
  // Adds blocks [num_blocks, new_num_blocks) to the pool (on-demand KV growth).
  void grow(int new_num_blocks);
  // Returns the blocks of table from index first on to the pool (those before it were returned
  // by release_range) and clears it. A block freed twice aborts.
  void release(std::vector<int32_t>& table, size_t first = 0);
  // Returns table[first, last) to the pool and leaves the table as it is: a sliding window's
  // blocks behind every future query, whose ids stay in place. A block freed twice aborts.
  void release_range(const std::vector<int32_t>& table, size_t first, size_t last);

 private:
  std::vector<int32_t> free_;    // stack of free block ids
  std::vector<uint8_t> in_use_;  // (num_blocks) 1 while a table holds the block
  int peak_used_ = 0;
};

}  // namespace ib::detail
