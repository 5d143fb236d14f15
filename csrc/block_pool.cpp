#include "block_pool.hpp"

#include <stdexcept>
#include <string>

#include "check.hpp"

namespace steptrace {

BlockPool::BlockPool(int32_t num_blocks)
    : refs_(num_blocks, 0),
      prev_(num_blocks, kNone),
      next_(num_blocks, kNone),
      hash_of_(num_blocks, 0),
      indexed_(num_blocks, false) {
  free_.reserve(num_blocks);
  for (int32_t b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
  size_t slots = 1;
  while (slots < 2 * static_cast<size_t>(num_blocks)) slots *= 2;
  slot_hash_.assign(slots, 0);
  slot_block_.assign(slots, kNone);
  mask_ = slots - 1;
}

void BlockPool::allocate(int32_t n, std::vector<int32_t>& owner) {
  if (n > num_free())
    throw std::logic_error("allocate " + std::to_string(n) + " blocks with " +
                           std::to_string(num_free()) + " free");
  for (int32_t i = 0; i < n; ++i) {
    int32_t block;
    if (!free_.empty()) {
      block = free_.back();
      free_.pop_back();
    } else {
      block = oldest_;
      unretain(block);
      unindex(block);
      ++num_evicted_;
    }
    refs_[block] = 1;
    owner.push_back(block);
  }
}

void BlockPool::share(int32_t block, std::vector<int32_t>& owner) {
  if (refs_[block] == 0) unretain(block);
  ++refs_[block];
  owner.push_back(block);
}

void BlockPool::release(std::vector<int32_t>& owner) {
  bool retains = false;
  for (int32_t block : owner) {
    if (--refs_[block] > 0) continue;
    if (indexed_[block])
      retains = true;
    else
      free_.push_back(block);
  }
  // An owner's later blocks are evicted first: an earlier block's eviction would leave them
  // unreachable anyway (a lookup takes the leading run of a prompt's blocks).
  if (retains)
    for (auto it = owner.rbegin(); it != owner.rend(); ++it)
      if (refs_[*it] == 0 && indexed_[*it]) retain(*it);
  owner.clear();
}

std::optional<int32_t> BlockPool::lookup(int64_t block_hash) const {
  const int32_t block = slot_block_[find_slot(block_hash)];
  if (block == kNone) return std::nullopt;
  return block;
}

void BlockPool::index(int32_t block, int64_t block_hash) {
  if (indexed_[block]) return;
  const size_t slot = find_slot(block_hash);
  if (slot_block_[slot] != kNone) return;
  slot_hash_[slot] = block_hash;
  slot_block_[slot] = block;
  hash_of_[block] = block_hash;
  indexed_[block] = true;
}

size_t BlockPool::find_slot(int64_t block_hash) const {
  size_t slot = static_cast<uint64_t>(block_hash) & mask_;
  while (slot_block_[slot] != kNone && slot_hash_[slot] != block_hash) slot = (slot + 1) & mask_;
  return slot;
}

// Backward-shift deletion: every later entry of the probe run that may move to the hole
// does, so a lookup never stops early at it.
void BlockPool::erase_slot(size_t slot) {
  for (size_t next = (slot + 1) & mask_; slot_block_[next] != kNone; next = (next + 1) & mask_) {
    const size_t home = static_cast<uint64_t>(slot_hash_[next]) & mask_;
    const bool stays = slot <= next ? (slot < home && home <= next) : (slot < home || home <= next);
    if (stays) continue;
    slot_hash_[slot] = slot_hash_[next];
    slot_block_[slot] = slot_block_[next];
    slot = next;
  }
  slot_block_[slot] = kNone;
}

void BlockPool::retain(int32_t block) {
  prev_[block] = newest_;
  next_[block] = kNone;
  (newest_ == kNone ? oldest_ : next_[newest_]) = block;
  newest_ = block;
  ++num_retained_;
}

void BlockPool::unretain(int32_t block) {
  (prev_[block] == kNone ? oldest_ : next_[prev_[block]]) = next_[block];
  (next_[block] == kNone ? newest_ : prev_[next_[block]]) = prev_[block];
  prev_[block] = next_[block] = kNone;
  --num_retained_;
}

void BlockPool::unindex(int32_t block) {
  erase_slot(find_slot(hash_of_[block]));
  indexed_[block] = false;
}

void BlockPool::check(const std::vector<int32_t>& owners) const {
  if constexpr (!kChecks) return;
  STEPTRACE_CHECK(owners.size() == refs_.size(), std::to_string(owners.size()) +
                                                     " owner counts for " +
                                                     std::to_string(refs_.size()) + " blocks");
  std::vector<bool> listed(refs_.size(), false);
  for (int32_t block : free_) {
    STEPTRACE_CHECK(block >= 0 && block < num_total() && !listed[block] && refs_[block] == 0 &&
                        !indexed_[block],
                    "free block " + std::to_string(block) + " of " + std::to_string(num_total()) +
                        " is unowned, unindexed and listed once");
    listed[block] = true;
  }
  int32_t retained = 0;
  for (int32_t block = oldest_, before = kNone; block != kNone;
       before = block, block = next_[block]) {
    STEPTRACE_CHECK(
        retained < num_total() && !listed[block] && refs_[block] == 0 && indexed_[block] &&
            prev_[block] == before,
        "retained block " + std::to_string(block) + " is unowned, indexed, linked and listed once");
    listed[block] = true;
    ++retained;
  }
  STEPTRACE_CHECK(retained == num_retained_, std::to_string(retained) +
                                                 " retained blocks listed, " +
                                                 std::to_string(num_retained_) + " counted");
  int32_t owned = 0;
  for (int32_t b = 0; b < num_total(); ++b) {
    STEPTRACE_CHECK(refs_[b] == owners[b], "block " + std::to_string(b) + " has refcount " +
                                               std::to_string(refs_[b]) + " and " +
                                               std::to_string(owners[b]) + " owners");
    owned += refs_[b] > 0;
    STEPTRACE_CHECK(listed[b] != (refs_[b] > 0),
                    "block " + std::to_string(b) + " is both owned and free, or neither");
  }
  STEPTRACE_CHECK(num_free() + owned == num_total(),
                  std::to_string(num_free()) + " free + " + std::to_string(owned) +
                      " owned blocks of " + std::to_string(num_total()));
  int32_t indexed = 0, hashes = 0;
  for (int32_t b = 0; b < num_total(); ++b) indexed += indexed_[b];
  for (size_t slot = 0; slot < slot_block_.size(); ++slot) {
    const int32_t block = slot_block_[slot];
    if (block == kNone) continue;
    ++hashes;
    STEPTRACE_CHECK(indexed_[block] && hash_of_[block] == slot_hash_[slot] &&
                        find_slot(slot_hash_[slot]) == slot,
                    "hash " + std::to_string(slot_hash_[slot]) + " names block " +
                        std::to_string(block) + " and is found where it is");
  }
  STEPTRACE_CHECK(hashes == indexed, std::to_string(hashes) + " hashes, " +
                                         std::to_string(indexed) + " indexed blocks");
}

}  // namespace steptrace
