#include "virtual_replay.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "steady_clock.hpp"

namespace steptrace {

VirtualReplay::VirtualReplay(Scheduler& scheduler, ModeledStep& step, StepLog& log,
                             const ReplayRequests& requests, bool overlap, ReplayHooks& hooks)
    : scheduler_(scheduler),
      step_(step),
      log_(log),
      requests_(requests),
      overlap_(overlap),
      hooks_(hooks) {
  if (requests.sessions.parent) turns_.emplace(requests.sessions, requests.n, requests.arrival_s);
}

bool VirtualReplay::run(int64_t progress_every) {
  bool go_on = true;
  while (go_on && (arrivals_left() || has_unfinished()))
    if (step() && steps_ % progress_every == 0)
      go_on = hooks_.progress(log_.num_done(), requests_.n);
  return hooks_.progress(log_.num_done(), requests_.n) && go_on;
}

bool VirtualReplay::step() {
  add_due();
  if (!has_unfinished()) {  // idle until the next arrival
    if (turns_ && !turns_->empty())
      now_ = std::max(now_, turns_->next_s());
    else if (!turns_ && next_ < requests_.n)
      now_ = requests_.arrival_s[next_];
    return false;
  }
  const double t_start = now_;
  Launched* done;
  if (!overlap_) {
    done = launch();
  } else {  // launch this step, then post-process the one in flight
    Launched* launched = scheduler_.is_finished() ? nullptr : launch();
    done = inflight_;
    inflight_ = launched;
    if (done == nullptr) return false;  // the first step is still in flight
  }
  record(*done, t_start);
  ++steps_;
  return true;
}

bool VirtualReplay::due() const {
  if (requests_.concurrency) return next_ < log_.num_done() + requests_.concurrency;
  return requests_.arrival_s[next_] <= now_;
}

void VirtualReplay::add_due() {
  if (!turns_) {
    while (next_ < requests_.n && due()) add(next_++);
    return;
  }
  double t;
  int64_t i;
  while (turns_->take_due(now_, t, i)) add_turn(i, t);
}

void VirtualReplay::add(int64_t i) {
  const bool closed = requests_.concurrency > 0;
  if (closed) requests_.released_s[i] = now_;
  const SeqRecord added = scheduler_.add_sequence(
      i, requests_.prompt_len[i], requests_.max_new_tokens[i],
      closed ? now_ : requests_.arrival_s[i], requests_.hashes(i), requests_.hash_block_size);
  log_.enqueue(added, now_);
}

// Turn i, arrived at t, enqueued now; one rejected (or done) as it came ends there.
void VirtualReplay::add_turn(int64_t i, double t) {
  requests_.released_s[i] = t;
  const SeqRecord added = scheduler_.add_sequence(
      i, requests_.prompt_len[i], requests_.max_new_tokens[i], t, requests_.hashes(i),
      requests_.hash_block_size, false, requests_.sessions.session_id[i]);
  log_.enqueue(added, now_);
  if (added.status != SeqStatus::kWaiting) turn_ended(i);
}

void VirtualReplay::turn_ended(int64_t i) {
  const int64_t session = turns_->ended(i, now_);
  if (session >= 0) scheduler_.end_session(session);
}

VirtualReplay::Launched* VirtualReplay::launch() {
  Launched& l = slots_[next_slot_];
  next_slot_ ^= overlap_ ? 1 : 0;
  l.start_ns = steady_now_ns();
  l.plan = scheduler_.schedule();
  l.sched_call_ns = steady_now_ns() - l.start_ns;
  step_.execute(*l.plan, l.out);
  return &l;
}

// The step's postprocess and record; the clock advances by the modeled step, rounded to
// the ns as the Python executor rounds it.
void VirtualReplay::record(Launched& done, double t_start) {
  const int64_t start = steady_now_ns();
  const PostprocessOutput post =
      scheduler_.postprocess(*done.plan, step_.mtp() ? &done.out.flat_accepted : nullptr);
  const int64_t end = steady_now_ns();
  const auto forward_ns = static_cast<int64_t>(std::nearbyint(done.out.seconds * 1e9));
  const StepTimes times{done.start_ns, done.sched_call_ns, forward_ns, 0,
                        end - start,   end - done.start_ns};
  now_ += static_cast<double>(forward_ns) / 1e9;
  const int64_t flush_ns = hooks_.before_record(0);
  log_.record(*done.plan, post, RecordedTimes{t_start, now_, times, flush_ns},
              done.out.costs.ranks);
  if (turns_) {
    for (int64_t id : post.finished) turn_ended(id);
    for (int64_t id : done.plan->rejected) turn_ended(id);
  }
  done.plan.reset();  // the scheduler recycles it
}

}  // namespace steptrace
