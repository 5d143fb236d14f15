#include "block_pool.hpp"

#include <stdexcept>
#include <string>

namespace steptrace {

BlockPool::BlockPool(int32_t num_blocks) : refs_(num_blocks, 0) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

void BlockPool::allocate(int32_t n, std::vector<int32_t>& owner) {
  if (n > num_free())
    throw std::logic_error("allocate " + std::to_string(n) + " blocks with " +
                           std::to_string(num_free()) + " free");
  for (int32_t i = 0; i < n; ++i) {
    const int32_t block = free_.back();
    free_.pop_back();
    refs_[block] = 1;
    owner.push_back(block);
  }
}

void BlockPool::share(int32_t block, std::vector<int32_t>& owner) {
  ++refs_[block];
  owner.push_back(block);
}

void BlockPool::release(std::vector<int32_t>& owner) {
  for (int32_t block : owner) {
    if (--refs_[block] > 0) continue;
    if (!hash_of_.empty()) {
      auto it = hash_of_.find(block);
      if (it != hash_of_.end()) {
        by_hash_.erase(it->second);
        hash_of_.erase(it);
      }
    }
    free_.push_back(block);
  }
  owner.clear();
}

std::optional<int32_t> BlockPool::lookup(int64_t block_hash) const {
  auto it = by_hash_.find(block_hash);
  if (it == by_hash_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::index(int32_t block, int64_t block_hash) {
  if (by_hash_.count(block_hash) || hash_of_.count(block)) return;
  by_hash_.emplace(block_hash, block);
  hash_of_.emplace(block, block_hash);
}

}  // namespace steptrace
