#include "kv_links.hpp"

#include <algorithm>
#include <limits>

namespace steptrace {

double KvLinks::start(int64_t key, int64_t sender, int64_t receiver, double nbytes,
                      double sender_bps, double receiver_bps, double now) {
  active_[key] = Transfer{sender, receiver, nbytes, sender_bps, receiver_bps, now};
  on_[sender].insert(key);
  on_[receiver].insert(key);
  share(sender, receiver, now);
  return active_[key].rate;
}

std::pair<double, int64_t> KvLinks::next_end() {
  while (!ends_.empty()) {
    const auto& [end, version, key] = ends_.top();
    const auto it = active_.find(key);
    if (it != active_.end() && it->second.version == version) return {end, key};
    ends_.pop();
  }
  return {std::numeric_limits<double>::infinity(), -1};
}

void KvLinks::finish(int64_t key, double now) {
  const Transfer t = active_.at(key);
  active_.erase(key);
  on_[t.sender].erase(key);
  on_[t.receiver].erase(key);
  share(t.sender, t.receiver, now);
}

void KvLinks::share(int64_t sender, int64_t receiver, double now) {
  std::set<int64_t> touched = on_[sender];
  touched.insert(on_[receiver].begin(), on_[receiver].end());
  for (int64_t key : touched) {
    Transfer& t = active_.at(key);
    t.remaining = std::max(0.0, t.remaining - t.rate * (now - t.since));
    t.since = now;
    t.rate = std::min(t.sender_bps / static_cast<double>(on_[t.sender].size()),
                      t.receiver_bps / static_cast<double>(on_[t.receiver].size()));
    ++t.version;
    ends_.emplace(now + t.remaining / t.rate, t.version, key);
  }
}

}  // namespace steptrace
