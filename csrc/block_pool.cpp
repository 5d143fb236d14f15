#include "block_pool.hpp"

#include <stdexcept>
#include <string>

#include "check.hpp"

namespace steptrace {

BlockPool::BlockPool(int32_t num_blocks, int32_t host_blocks)
    : refs_(num_blocks, 0),
      prev_(num_blocks, kNone),
      next_(num_blocks, kNone),
      holder_(num_blocks, -1),
      hash_of_(num_blocks, 0),
      indexed_(num_blocks, false),
      host_capacity_(static_cast<size_t>(host_blocks)) {
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
      block = lists_[0].size > 0 ? lists_[0].oldest : lists_[1].oldest;
      unretain(block);
      offload(hash_of_[block]);
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

void BlockPool::release(std::vector<int32_t>& owner, int64_t session) {
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
      if (refs_[*it] == 0 && indexed_[*it]) {
        holder_[*it] = session;
        retain(*it);
      }
  owner.clear();
}

void BlockPool::unhold(int64_t session) {
  for (int32_t block = lists_[1].oldest; block != kNone;) {
    const int32_t next = next_[block];
    if (holder_[block] == session) {
      unretain(block);
      retain(block);
    }
    block = next;
  }
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

void BlockPool::offload(int64_t block_hash) {
  if (host_capacity_ == 0) return;
  const auto it = host_.find(block_hash);
  if (it != host_.end()) {
    host_order_.splice(host_order_.end(), host_order_, it->second);
    return;
  }
  if (host_.size() == host_capacity_) {
    host_.erase(host_order_.front());
    host_order_.pop_front();
  }
  host_.emplace(block_hash, host_order_.insert(host_order_.end(), block_hash));
}

void BlockPool::reload(int64_t block_hash) {
  const auto it = host_.find(block_hash);
  if (it != host_.end()) host_order_.splice(host_order_.end(), host_order_, it->second);
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
  List& list = list_of(block);
  prev_[block] = list.newest;
  next_[block] = kNone;
  (list.newest == kNone ? list.oldest : next_[list.newest]) = block;
  list.newest = block;
  ++list.size;
}

void BlockPool::unretain(int32_t block) {
  List& list = list_of(block);
  (prev_[block] == kNone ? list.oldest : next_[prev_[block]]) = next_[block];
  (next_[block] == kNone ? list.newest : prev_[next_[block]]) = prev_[block];
  prev_[block] = next_[block] = kNone;
  --list.size;
  holder_[block] = -1;
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
  for (int held = 0; held < 2; ++held) {
    int32_t retained = 0;
    for (int32_t block = lists_[held].oldest, before = kNone; block != kNone;
         before = block, block = next_[block]) {
      STEPTRACE_CHECK(retained < num_total() && !listed[block] && refs_[block] == 0 &&
                          indexed_[block] && prev_[block] == before &&
                          (holder_[block] >= 0) == (held == 1),
                      "retained block " + std::to_string(block) +
                          " is unowned, indexed, linked and listed once, in its list");
      listed[block] = true;
      ++retained;
    }
    STEPTRACE_CHECK(retained == lists_[held].size,
                    std::to_string(retained) + " retained blocks listed, " +
                        std::to_string(lists_[held].size) + " counted");
  }
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
  STEPTRACE_CHECK(host_.size() <= host_capacity_ && host_.size() == host_order_.size(),
                  std::to_string(host_.size()) + " host blocks of " +
                      std::to_string(host_capacity_) + ", " + std::to_string(host_order_.size()) +
                      " in order");
}

}  // namespace steptrace
