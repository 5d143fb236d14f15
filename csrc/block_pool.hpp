// A DP rank's pool of paged KV blocks, with reference counts so that sequences with a
// common prompt prefix share the blocks that hold it (prefix caching). A full prompt block
// is indexed by its hash once its KV is committed, and leaves the index when its last
// owner lets it go.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace steptrace {

class BlockPool {
 public:
  explicit BlockPool(int32_t num_blocks);

  int32_t num_free() const { return static_cast<int32_t>(free_.size()); }
  int32_t num_total() const { return static_cast<int32_t>(refs_.size()); }
  int32_t refcount(int32_t block) const { return refs_.at(block); }

  // Appends n free blocks to `owner`; the caller has checked n <= num_free().
  void allocate(int32_t n, std::vector<int32_t>& owner);
  // Appends an owned block to another owner.
  void share(int32_t block, std::vector<int32_t>& owner);
  // Drops `owner`'s references (freeing blocks that reach zero) and clears it.
  void release(std::vector<int32_t>& owner);

  std::optional<int32_t> lookup(int64_t block_hash) const;
  // Makes a committed full block findable by its hash; the first writer wins.
  void index(int32_t block, int64_t block_hash);

  // owners[b]: how many owner lists hold block b. Throws std::logic_error (STEPTRACE_CHECK
  // builds; a no-op otherwise) unless every reference count equals its owners, the free
  // list holds exactly the unowned blocks, each once, and the hash index names owned
  // blocks both ways.
  void check(const std::vector<int32_t>& owners) const;

 private:
  std::vector<int32_t> free_;  // a stack: the lowest ids are handed out first on a fresh pool
  std::vector<int32_t> refs_;
  std::unordered_map<int64_t, int32_t> by_hash_;
  std::unordered_map<int32_t, int64_t> hash_of_;
};

}  // namespace steptrace
