#include "session_turns.hpp"

#include <algorithm>
#include <cstddef>
#include <tuple>

namespace steptrace {

SessionTurns::SessionTurns(const SessionTree& tree, int64_t n, const double* arrival_s)
    : tree_(tree), next_(n, -1), first_subagent_(n + 1, 0), pending_(n, 1), done_(n, 0) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = tree.parent[i];
    if (p < 0) continue;
    if (tree.subagent[i])
      ++first_subagent_[p + 1];
    else
      next_[p] = i;
  }
  for (int64_t i = 0; i < n; ++i) {
    pending_[i] += first_subagent_[i + 1];
    first_subagent_[i + 1] += first_subagent_[i];
  }
  subagents_.resize(first_subagent_[n]);
  std::vector<int64_t> filled(first_subagent_.begin(), first_subagent_.end() - 1);
  std::vector<int64_t> roots;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t p = tree.parent[i];
    if (p < 0)
      roots.push_back(i);
    else if (tree.subagent[i])
      subagents_[filled[p]++] = i;
  }
  const auto live = static_cast<size_t>(tree.live);
  const size_t first = tree.live ? std::min(live, roots.size()) : roots.size();
  for (size_t k = 0; k < first; ++k)
    events_.emplace(tree.live ? 0.0 : arrival_s[roots[k]], roots[k]);
  waiting_roots_.assign(roots.rbegin(), roots.rend() - static_cast<std::ptrdiff_t>(first));
}

bool SessionTurns::take_due(double now, double& t, int64_t& row) {
  if (events_.empty() || events_.top().first > now) return false;
  std::tie(t, row) = events_.top();
  events_.pop();
  return true;
}

int64_t SessionTurns::ended(int64_t row, double t) {
  if (done_[row]) return -1;  // rejected as it came, and the plan says so again
  done_[row] = 1;
  for (int64_t k = first_subagent_[row]; k < first_subagent_[row + 1]; ++k)
    events_.emplace(t + tree_.gap_s[subagents_[k]], subagents_[k]);
  return settle(row, t);
}

// One of what turn i's next turn waits for is done; the session thereby ended, or -1.
int64_t SessionTurns::settle(int64_t i, double t) {
  if (--pending_[i]) return -1;
  const int64_t c = next_[i];
  if (c < 0) return subtree_done(i, t);
  events_.emplace(t + tree_.gap_s[c], c);
  return -1;
}

// Turn i's subtree (its chain of next turns included) has ended at t; the session thereby
// ended, or -1.
int64_t SessionTurns::subtree_done(int64_t i, double t) {
  for (int64_t p = tree_.parent[i]; p >= 0; i = p, p = tree_.parent[i])
    if (tree_.subagent[i]) return settle(p, t);
  if (!waiting_roots_.empty()) {  // a closed loop's session ended: the next one starts
    events_.emplace(t, waiting_roots_.back());
    waiting_roots_.pop_back();
  }
  return tree_.session_id[i];
}

}  // namespace steptrace
