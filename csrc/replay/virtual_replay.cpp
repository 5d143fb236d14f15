#include "virtual_replay.hpp"

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
      hooks_(hooks) {}

bool VirtualReplay::run(int64_t progress_every) {
  bool go_on = true;
  while (go_on && (next_ < requests_.n || has_unfinished()))
    if (step() && steps_ % progress_every == 0)
      go_on = hooks_.progress(log_.num_done(), requests_.n);
  return hooks_.progress(log_.num_done(), requests_.n) && go_on;
}

bool VirtualReplay::step() {
  while (next_ < requests_.n && due()) add(next_++);
  if (!has_unfinished()) {  // idle until the next arrival
    if (next_ < requests_.n) now_ = requests_.arrival_s[next_];
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

void VirtualReplay::add(int64_t i) {
  const bool closed = requests_.concurrency > 0;
  if (closed) requests_.released_s[i] = now_;
  std::vector<int64_t> hashes;
  if (requests_.hash_offsets)
    hashes.assign(requests_.hash_ids + requests_.hash_offsets[i],
                  requests_.hash_ids + requests_.hash_offsets[i + 1]);
  const SeqRecord added = scheduler_.add_sequence(
      i, requests_.prompt_len[i], requests_.max_new_tokens[i],
      closed ? now_ : requests_.arrival_s[i], hashes, requests_.hash_block_size);
  log_.enqueue(added, now_);
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
  done.plan.reset();  // the scheduler recycles it
}

}  // namespace steptrace
