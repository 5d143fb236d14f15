#include "block_pool.hpp"

#include <stdexcept>
#include <string>

namespace steptrace {

BlockPool::BlockPool(int32_t num_blocks) : num_total_(num_blocks) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void BlockPool::allocate(int32_t n, std::vector<int32_t>& owner) {
  if (n > num_free())
    throw std::logic_error("allocate " + std::to_string(n) + " blocks with " +
                           std::to_string(num_free()) + " free");
  for (int32_t i = 0; i < n; ++i) {
    owner.push_back(free_.back());
    free_.pop_back();
  }
}

void BlockPool::release(std::vector<int32_t>& owner) {
  free_.insert(free_.end(), owner.begin(), owner.end());
  owner.clear();
}

}  // namespace steptrace
