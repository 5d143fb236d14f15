// A DP rank's pool of paged KV blocks.
#pragma once

#include <cstdint>
#include <vector>

namespace steptrace {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_total() const { return num_total_; }

  // Appends n free blocks to `owner`; the caller has checked n <= num_free().
  void allocate(int32_t n, std::vector<int32_t>& owner);
  // Returns all of `owner`'s blocks to the pool and clears it.
  void release(std::vector<int32_t>& owner);

 private:
  int32_t num_total_;
  std::vector<int32_t> free_;  // a stack: the lowest ids are handed out first on a fresh pool
};

}  // namespace steptrace
