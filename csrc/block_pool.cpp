#include "block_pool.hpp"

#include <stdexcept>
#include <string>

#include "check.hpp"

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

void BlockPool::check(const std::vector<int32_t>& owners) const {
  if constexpr (!kChecks) return;
  STEPTRACE_CHECK(owners.size() == refs_.size(), std::to_string(owners.size()) +
                                                     " owner counts for " +
                                                     std::to_string(refs_.size()) + " blocks");
  std::vector<bool> listed(refs_.size(), false);
  for (int32_t block : free_) {
    STEPTRACE_CHECK(block >= 0 && block < num_total() && !listed[block] && refs_[block] == 0,
                    "free block " + std::to_string(block) + " of " + std::to_string(num_total()) +
                        " is unowned and listed once");
    listed[block] = true;
  }
  int32_t owned = 0;
  for (int32_t b = 0; b < num_total(); ++b) {
    STEPTRACE_CHECK(refs_[b] == owners[b], "block " + std::to_string(b) + " has refcount " +
                                               std::to_string(refs_[b]) + " and " +
                                               std::to_string(owners[b]) + " owners");
    owned += refs_[b] > 0;
  }
  STEPTRACE_CHECK(num_free() + owned == num_total(),
                  std::to_string(num_free()) + " free + " + std::to_string(owned) +
                      " owned blocks of " + std::to_string(num_total()));
  STEPTRACE_CHECK(by_hash_.size() == hash_of_.size(),
                  std::to_string(by_hash_.size()) + " hashes, " + std::to_string(hash_of_.size()) +
                      " indexed blocks");
  for (const auto& [block_hash, block] : by_hash_) {
    auto it = hash_of_.find(block);
    STEPTRACE_CHECK(it != hash_of_.end() && it->second == block_hash && refs_[block] > 0,
                    "hash " + std::to_string(block_hash) + " names block " + std::to_string(block) +
                        " (refcount " + std::to_string(refs_[block]) + ")");
  }
}

}  // namespace steptrace
