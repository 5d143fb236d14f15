// A session trace's turns released as their parents end (docs/workloads.md, "Sessions"), for
// the C++ replay loops: a turn arrives when its parent's last token is out plus its gap; a
// turn's sub-agent children arrive together, and its next turn once it and every sub-agent
// subtree have ended. Sessions start at the trace's times, or with `live` as a closed loop
// of that many, the next (in trace order) starting when one ends. It mirrors
// harness/replay/sessions.py event for event: turns due at one instant come in (time, row)
// order.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <utility>
#include <vector>

namespace steptrace {

// A session trace's structure, by request row (harness/replay/sessions.py, SessionTree).
struct SessionTree {
  const int64_t* parent = nullptr;  // the parent's row (-1: a root); nullptr: no sessions
  const double* gap_s = nullptr;    // after the parent's end (s)
  const uint8_t* subagent = nullptr;  // the turn is a sub-agent's first
  const int64_t* session_id = nullptr;
  int64_t live = 0;  // a closed loop's live sessions; 0: the sessions start at their times
};

class SessionTurns {
 public:
  // n turns; arrival_s: a root's start (open loop).
  SessionTurns(const SessionTree& tree, int64_t n, const double* arrival_s);
  bool empty() const { return events_.empty(); }
  double next_s() const { return events_.top().first; }  // not empty()
  // The next turn due by `now` taken: (arrival, row); false when none is.
  bool take_due(double now, double& t, int64_t& row);
  // Turn `row`'s last token is out, or it was rejected, at t (again: nothing). Returns the
  // session that has thereby ended, every turn of it (the scheduler's end_session), or -1.
  int64_t ended(int64_t row, double t);

 private:
  using Event = std::pair<double, int64_t>;  // (arrival, row)
  int64_t settle(int64_t i, double t);
  int64_t subtree_done(int64_t i, double t);

  const SessionTree tree_;
  std::vector<int64_t> next_;     // a turn's next turn (-1: none)
  std::vector<int64_t> first_subagent_, subagents_;  // turn i's: subagents_[first[i]:first[i+1]]
  std::vector<int64_t> pending_;  // what a turn's next turn still waits for
  std::vector<uint8_t> done_;
  std::vector<int64_t> waiting_roots_;  // a closed loop's sessions not started, last first
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> events_;
};

}  // namespace steptrace
