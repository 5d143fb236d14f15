#include "routers.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <tuple>

#include "block_hashes.hpp"

namespace steptrace {

namespace {

constexpr int64_t kBalanceAbs = 64;
constexpr double kBalanceRel = 1.5, kCacheThreshold = 0.3;

// The instance k with the smallest key(k), the lower instance on ties.
template <typename Key>
int64_t argmin(int64_t n, Key key) {
  int64_t best = 0;
  for (int64_t k = 1; k < n; ++k)
    if (key(k) < key(best)) best = k;
  return best;
}

}  // namespace

PrefillRouter::PrefillRouter(const std::string& policy, int64_t instances, int64_t capacity_blocks,
                             int64_t block_size)
    : n_(instances),
      capacity_(capacity_blocks),
      block_size_(block_size),
      load_(instances),
      tokens_(instances),
      blocks_(instances) {
  if (policy == "round_robin")
    policy_ = Policy::kRoundRobin;
  else if (policy == "least_tokens")
    policy_ = Policy::kLeastTokens;
  else if (policy == "cache_aware")
    policy_ = Policy::kCacheAware;
  else if (policy == "session_affinity")
    policy_ = Policy::kSessionAffinity;
  else
    throw std::invalid_argument("prefill router: unknown policy " + policy);
  if (instances < 1) throw std::invalid_argument("prefill router: no instance");
}

int64_t PrefillRouter::route(int64_t prompt_len, const std::vector<int64_t>& hashes,
                             int64_t session) {
  int64_t i;
  if (policy_ == Policy::kRoundRobin) {
    i = next_;
    next_ = (next_ + 1) % n_;
  } else if (policy_ == Policy::kLeastTokens) {
    i = argmin(n_, [&](int64_t k) { return tokens_[k]; });
  } else {
    i = policy_ == Policy::kCacheAware ? cache_aware(prompt_len, hashes)
                                       : session_affinity(prompt_len, hashes, session);
    remember(i, hashes);
  }
  ++load_[i];
  tokens_[i] += prompt_len;
  return i;
}

void PrefillRouter::prefilled(int64_t instance, int64_t prompt_len) {
  if (instance < 0 || instance >= n_)
    throw std::invalid_argument("prefill router: no instance " + std::to_string(instance));
  --load_[instance];
  tokens_[instance] -= prompt_len;
}

std::vector<int64_t> PrefillRouter::hashes(const std::vector<int64_t>& hash_ids,
                                           int64_t hash_block_size, int64_t prompt_len) const {
  std::vector<int64_t> out;
  if (policy_ == Policy::kCacheAware || policy_ == Policy::kSessionAffinity)
    block_hashes(hash_ids, hash_block_size ? hash_block_size : block_size_,
                 static_cast<int32_t>(block_size_), static_cast<int32_t>(prompt_len), out);
  return out;
}

int64_t PrefillRouter::cache_aware(int64_t prompt_len, const std::vector<int64_t>& hashes) const {
  const int64_t fewest = argmin(n_, [&](int64_t k) { return load_[k]; });
  const int64_t most = *std::max_element(load_.begin(), load_.end());
  if (most - load_[fewest] > kBalanceAbs &&
      static_cast<double>(most) > kBalanceRel * static_cast<double>(load_[fewest]))
    return fewest;
  std::vector<int64_t> hits(n_);
  for (int64_t k = 0; k < n_; ++k) hits[k] = hit(k, hashes);
  const int64_t best = argmin(n_, [&](int64_t k) { return std::make_pair(-hits[k], load_[k]); });
  if (static_cast<double>(hits[best] * block_size_) >
      kCacheThreshold * static_cast<double>(prompt_len))
    return best;
  return argmin(n_, [&](int64_t k) { return std::make_pair(blocks_[k].order.size(), load_[k]); });
}

// A session's turn goes where its latest turn went, which holds its prefix, unless that
// instance is overloaded; a first turn, a turn of no session or an overloaded instance's
// by cache_aware.
int64_t PrefillRouter::session_affinity(int64_t prompt_len, const std::vector<int64_t>& hashes,
                                        int64_t session) {
  if (session < 0) return cache_aware(prompt_len, hashes);
  const auto [it, first] = session_instance_.try_emplace(session, 0);
  if (first || overloaded(it->second)) it->second = cache_aware(prompt_len, hashes);
  return it->second;
}

bool PrefillRouter::overloaded(int64_t instance) const {
  const int64_t fewest = *std::min_element(load_.begin(), load_.end());
  return load_[instance] - fewest > kBalanceAbs &&
         static_cast<double>(load_[instance]) > kBalanceRel * static_cast<double>(fewest);
}

int64_t PrefillRouter::hit(int64_t instance, const std::vector<int64_t>& hashes) const {
  const auto& where = blocks_[instance].where;
  for (size_t n = 0; n < hashes.size(); ++n)
    if (!where.count(hashes[n])) return static_cast<int64_t>(n);
  return static_cast<int64_t>(hashes.size());
}

void PrefillRouter::remember(int64_t instance, const std::vector<int64_t>& hashes) {
  Record& r = blocks_[instance];
  for (int64_t h : hashes) {
    const auto it = r.where.find(h);
    if (it != r.where.end()) r.order.erase(it->second);
    r.order.push_back(h);
    r.where[h] = std::prev(r.order.end());
  }
  while (static_cast<int64_t>(r.order.size()) > capacity_) {
    r.where.erase(r.order.front());
    r.order.pop_front();
  }
}

int64_t awaited_blocks(const std::vector<int64_t>& prompt_lens, int64_t block_size) {
  int64_t blocks = 0;
  for (int64_t p : prompt_lens) blocks += (p + block_size - 1) / block_size;
  return blocks;
}

DecodeRouter::DecodeRouter(const std::string& policy, int64_t instances) : n_(instances) {
  if (policy != "round_robin" && policy != "least_kv")
    throw std::invalid_argument("decode router: unknown policy " + policy);
  if (instances < 1) throw std::invalid_argument("decode router: no instance");
  least_kv_ = policy == "least_kv";
}

int64_t DecodeRouter::route(const std::vector<int64_t>& free_blocks) {
  if (!least_kv_) {
    const int64_t i = next_;
    next_ = (next_ + 1) % n_;
    return i;
  }
  if (static_cast<int64_t>(free_blocks.size()) != n_)
    throw std::invalid_argument("decode router: least_kv needs the free blocks of each of the " +
                                std::to_string(n_) + " instances, got " +
                                std::to_string(free_blocks.size()));
  return argmin(n_, [&](int64_t k) { return -free_blocks[k]; });
}

}  // namespace steptrace
