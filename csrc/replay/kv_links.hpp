// KV transfers in flight over the devices' links, as a fluid (docs/disaggregation.md, "The
// KV transfer"): each device's link splits its bandwidth equally among the transfers on it,
// and a transfer moves at the smaller of its two ends' shares, recomputed whenever a
// transfer starts or ends on one of its devices. A start or an end touches only the
// transfers sharing a device with it; a heap holds each transfer's projected end (stale
// entries skipped). harness/replay/kv_links.py is the Python loop's twin: the same
// arithmetic in the same order, so both loops end every transfer at the same instant.
#pragma once

#include <cstdint>
#include <queue>
#include <set>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

namespace steptrace {

class KvLinks {
 public:
  // A transfer of nbytes from the sender device's link to the receiver's, each of the
  // given bandwidth (bytes/s), starting at now; returns its rate (bytes/s).
  double start(int64_t key, int64_t sender, int64_t receiver, double nbytes, double sender_bps,
               double receiver_bps, double now);
  // (time, key) of the transfer that ends first at today's shares; (inf, -1) with none.
  std::pair<double, int64_t> next_end();
  // The transfer `key` moved its last byte at now (its next_end).
  void finish(int64_t key, double now);

 private:
  struct Transfer {
    int64_t sender, receiver;
    double remaining;  // bytes, as of `since`
    double sender_bps, receiver_bps;
    double since = 0, rate = 0;
    int64_t version = 0;  // of its projected end in the heap
  };
  using End = std::tuple<double, int64_t, int64_t>;  // (projected end, version, key)

  void share(int64_t sender, int64_t receiver, double now);

  std::unordered_map<int64_t, Transfer> active_;
  std::unordered_map<int64_t, std::set<int64_t>> on_;  // device -> the transfers on its link
  std::priority_queue<End, std::vector<End>, std::greater<End>> ends_;
};

}  // namespace steptrace
