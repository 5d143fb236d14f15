// The routers in front of a P/D deployment's pools (docs/disaggregation.md, "Routers", has
// the policies' words); both P/D loops and the rank processes' route through these
// (engine._core binds them). A router sees what it sent where and what came back, never an
// instance's scheduler.
#pragma once

#include <cstdint>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

namespace steptrace {

class PrefillRouter {
 public:
  // policy: round_robin, least_tokens, cache_aware or session_affinity; capacity_blocks: an
  // instance's record of routed blocks keeps the most recent this many (cache_aware).
  PrefillRouter(const std::string& policy, int64_t instances, int64_t capacity_blocks,
                int64_t block_size);
  // The instance a request goes to; its load counted there. hashes: its prompt's block
  // hashes (cache_aware, session_affinity); session: the session whose turn it is (-1:
  // none; session_affinity).
  int64_t route(int64_t prompt_len, const std::vector<int64_t>& hashes, int64_t session = -1);
  // A request routed to `instance` left it (handed off or rejected).
  void prefilled(int64_t instance, int64_t prompt_len);
  // A request's chained block hashes (block_hashes.hpp), as cache_aware routes by them;
  // none for another policy, which reads none. hash_block_size 0: the engine's block size.
  std::vector<int64_t> hashes(const std::vector<int64_t>& hash_ids, int64_t hash_block_size,
                              int64_t prompt_len) const;

 private:
  enum class Policy { kRoundRobin, kLeastTokens, kCacheAware, kSessionAffinity };
  struct Record {  // routed block hashes, least recently routed first
    std::list<int64_t> order;
    std::unordered_map<int64_t, std::list<int64_t>::iterator> where;
  };
  int64_t cache_aware(int64_t prompt_len, const std::vector<int64_t>& hashes) const;
  int64_t session_affinity(int64_t prompt_len, const std::vector<int64_t>& hashes, int64_t session);
  bool overloaded(int64_t instance) const;  // cache_aware's imbalance, at this instance
  int64_t hit(int64_t instance, const std::vector<int64_t>& hashes) const;
  void remember(int64_t instance, const std::vector<int64_t>& hashes);

  Policy policy_;
  int64_t n_, capacity_, block_size_;
  std::vector<int64_t> load_;    // unfinished requests routed there
  std::vector<int64_t> tokens_;  // prompt tokens routed, not yet prefilled
  std::vector<Record> blocks_;
  std::unordered_map<int64_t, int64_t> session_instance_;  // where its latest turn went
  int64_t next_ = 0;
};

// The KV blocks the prompts of sequences routed to a decode instance and not yet admitted
// will take there: least_kv counts them out of the instance's free blocks.
int64_t awaited_blocks(const std::vector<int64_t>& prompt_lens, int64_t block_size);

class DecodeRouter {
 public:
  // policy: round_robin or least_kv.
  DecodeRouter(const std::string& policy, int64_t instances);
  bool wants_free_blocks() const { return least_kv_; }
  // The instance a prefilled sequence goes to; free_blocks per instance (least_kv).
  int64_t route(const std::vector<int64_t>& free_blocks);

 private:
  bool least_kv_;
  int64_t n_;
  int64_t next_ = 0;
};

}  // namespace steptrace
