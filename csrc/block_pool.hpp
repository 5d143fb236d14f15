// A DP rank's pool of paged KV blocks, with reference counts so that sequences with a
// common prompt prefix share the blocks that hold it (prefix caching). A full prompt block
// is indexed by its hash once its KV is committed. When its last owner lets it go it stays
// indexed, *retained*: free for allocation, yet still found by a lookup, until an
// allocation evicts it, least recently used first (docs/scheduling.md, "Prefix caching").
// A retained block released on behalf of a session still to come back (session retention)
// is *held*: evicted only once no other retained block is left. With a host tier, an evicted
// block's hash goes to the host tier, a least recently used set of at most host_blocks
// hashes, whose blocks a later prefix hit reloads instead of computing them again.
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <unordered_map>
#include <vector>

namespace steptrace {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks, int32_t host_blocks = 0);

  // Free blocks: never indexed ones and retained ones.
  int32_t num_free() const { return static_cast<int32_t>(free_.size()) + num_retained(); }
  int32_t num_retained() const { return lists_[0].size + lists_[1].size; }
  int32_t num_held() const { return lists_[1].size; }
  int32_t num_total() const { return static_cast<int32_t>(refs_.size()); }
  int32_t refcount(int32_t block) const { return refs_.at(block); }
  // Retained blocks evicted since the pool was made.
  int64_t num_evicted() const { return num_evicted_; }

  // Appends n free blocks to `owner`: unindexed ones first (last freed first), then retained
  // ones, least recently used first, held ones last, each leaving the index. The caller has
  // checked n <= num_free().
  void allocate(int32_t n, std::vector<int32_t>& owner);
  // Appends an indexed block to another owner (taking it out of retention if it was there).
  void share(int32_t block, std::vector<int32_t>& owner);
  // Drops `owner`'s references and clears it. A block that reaches zero is retained when
  // indexed, its owner's later blocks ahead of its earlier ones in eviction order; else it
  // is freed. session >= 0: the retained blocks are held for that session.
  void release(std::vector<int32_t>& owner, int64_t session = -1);
  // The blocks held for `session` become plain retained ones, the newest, in held order.
  void unhold(int64_t session);

  std::optional<int32_t> lookup(int64_t block_hash) const;
  // Host tier: whether it holds the block; reload() marks it the most recently used.
  bool on_host(int64_t block_hash) const { return host_.count(block_hash) > 0; }
  void reload(int64_t block_hash);
  int32_t num_host() const { return static_cast<int32_t>(host_.size()); }
  // Makes a committed full block findable by its hash; the first writer wins.
  void index(int32_t block, int64_t block_hash);

  // owners[b]: how many owner lists hold block b. Throws std::logic_error (STEPTRACE_CHECK
  // builds; a no-op otherwise) unless every reference count equals its owners, the free
  // list holds exactly the unowned unindexed blocks, each once, the retained lists exactly
  // the unowned indexed ones, the hash index names blocks both ways, and the host tier
  // holds at most its capacity.
  void check(const std::vector<int32_t>& owners) const;

 private:
  static constexpr int32_t kNone = -1;
  // The retained blocks as two doubly linked lists over block ids, oldest (next evicted)
  // first: [0] plain, [1] held (evicted once [0] is empty).
  struct List {
    int32_t oldest = kNone, newest = kNone, size = 0;
  };
  List& list_of(int32_t block) { return lists_[holder_[block] >= 0]; }
  // appends to its list (most recently used end); holder_[block] picks the list
  void retain(int32_t block);
  void unretain(int32_t block);
  void unindex(int32_t block);
  // The prefix index: open addressing with linear probing over a table sized once, at least
  // twice the blocks (a block has at most one hash), so indexing and eviction never allocate.
  // Block hashes come out of a 64-bit mixer (csrc/block_hashes.cpp): their low bits are the
  // home slot.
  size_t find_slot(int64_t block_hash) const;  // the hash's slot, or an empty one
  void erase_slot(size_t slot);

  std::vector<int32_t> free_;  // a stack: the lowest ids are handed out first on a fresh pool
  std::vector<int32_t> refs_;
  std::vector<int32_t> prev_, next_;
  List lists_[2];
  std::vector<int64_t> holder_;  // a held block's session, else -1
  int64_t num_evicted_ = 0;
  std::vector<int64_t> slot_hash_;
  std::vector<int32_t> slot_block_;  // kNone: empty
  size_t mask_ = 0;
  std::vector<int64_t> hash_of_;  // valid where indexed_
  std::vector<bool> indexed_;
  // The host tier: hashes, oldest (next dropped) first, and where each is in that order.
  size_t host_capacity_;
  std::list<int64_t> host_order_;
  std::unordered_map<int64_t, std::list<int64_t>::iterator> host_;
  void offload(int64_t block_hash);
};

}  // namespace steptrace
