#include "pd_replay.hpp"

#include <algorithm>
#include <cmath>

#include "steady_clock.hpp"

namespace steptrace {

namespace {

// A link's device: a pool's instance's DP rank.
int64_t device_key(bool prefill, int64_t instance, int32_t rank) {
  return (static_cast<int64_t>(prefill) << 62) | (instance << 24) | rank;
}

}  // namespace

PdReplay::PdReplay(std::vector<PdInstance>& instances, const ReplayRequests& requests,
                   const PdService& service, ReplayHooks& hooks)
    : instances_(instances),
      requests_(requests),
      service_(service),
      hooks_(hooks),
      prefill_router_(service.prefill_router,
                      std::count_if(instances.begin(), instances.end(),
                                    [](const PdInstance& i) { return i.prefill; }),
                      service.capacity_blocks, service.block_size),
      decode_router_(service.decode_router,
                     std::count_if(instances.begin(), instances.end(),
                                   [](const PdInstance& i) { return !i.prefill; })) {
  for (PdInstance& i : instances_) (i.prefill ? prefill_ : decode_).push_back(&i);
  if (requests.sessions.parent) turns_.emplace(requests.sessions, requests.n, requests.arrival_s);
}

bool PdReplay::run(int64_t progress_every) {
  bool go_on = true;
  while (go_on && advance())
    if (stepped_ && steps_ % progress_every == 0) go_on = hooks_.progress(done_, requests_.n);
  return hooks_.progress(done_, requests_.n) && go_on;
}

bool PdReplay::advance() {
  stepped_ = false;
  const double t_arrival = next_arrival();
  const auto [t_link, key] = links_.next_end();
  const double t_event = events_.empty() ? kNever : std::get<0>(events_.top());
  PdInstance* first = nullptr;
  for (PdInstance& i : instances_)
    if (!i.stalled && !i.scheduler->is_finished() && (!first || i.clock < first->clock)) first = &i;
  const double t_step = first ? first->clock : kNever;
  const double t = std::min({t_arrival, t_link, t_event, t_step});
  if (t == kNever) return false;
  now_ = t;
  if (t_arrival == t) {
    arrive(t);
  } else if (t_link == t) {
    transferred(key, t);
  } else if (t_event == t) {
    const auto [at, kind, order, seq_id] = events_.top();
    events_.pop();
    kind == kHandoff ? route_decode(seq_id, t) : kv_arrived(seq_id, t);
  } else {
    step(*first);
  }
  return true;
}

double PdReplay::next_arrival() const {
  if (turns_) return turns_->empty() ? kNever : turns_->next_s();
  if (next_ >= requests_.n) return kNever;
  if (requests_.concurrency)  // a closed loop: released when fewer than the window are in flight
    return next_ < done_ + requests_.concurrency ? now_ : kNever;
  return requests_.arrival_s[next_];
}

void PdReplay::wake(PdInstance& instance, double t) {
  instance.clock = std::max(instance.clock, t);
  instance.stalled = false;
}

// The next request (a session trace's: its next turn due) arrives at t.
void PdReplay::arrive(double t) {
  if (!turns_) {
    arrive(next_, t);
    return;
  }
  double at;
  int64_t i;
  turns_->take_due(t, at, i);
  arrive(i, at);
}

void PdReplay::arrive(int64_t i, double t) {
  ++next_;
  if (requests_.concurrency || turns_) requests_.released_s[i] = t;
  const int64_t prompt_len = requests_.prompt_len[i];
  const int64_t session = turns_ ? requests_.sessions.session_id[i] : -1;
  ids_.clear();
  if (requests_.hash_offsets)
    ids_.assign(requests_.hash_ids + requests_.hash_offsets[i],
                requests_.hash_ids + requests_.hash_offsets[i + 1]);
  hashes_ = prefill_router_.hashes(ids_, requests_.hash_block_size, prompt_len);
  PdInstance& instance = *prefill_[prefill_router_.route(prompt_len, hashes_, session)];
  const SeqRecord added =
      instance.scheduler->add_sequence(i, prompt_len, requests_.max_new_tokens[i], t, ids_,
                                       requests_.hash_block_size, false, session);
  instance.log->enqueue(added, t);  // rejected here: the next step's plan says so
  if (added.status != SeqStatus::kWaiting) ended(i, t);
  wake(instance, t);
}

void PdReplay::ended(int64_t seq_id, double t) {
  const int64_t session = turns_ ? turns_->ended(seq_id, t) : -1;
  if (session >= 0)
    for (PdInstance& instance : instances_) instance.scheduler->end_session(session);
}

void PdReplay::step(PdInstance& instance) {
  const double t0 = instance.clock;
  const int64_t start = steady_now_ns();
  const auto plan = instance.scheduler->schedule();
  const int64_t sched_call_ns = steady_now_ns() - start;
  instance.step->execute(*plan, out_);
  const int64_t post_start = steady_now_ns();
  const PostprocessOutput post =
      instance.scheduler->postprocess(*plan, instance.step->mtp() ? &out_.flat_accepted : nullptr);
  const int64_t end = steady_now_ns();
  const auto forward_ns = static_cast<int64_t>(std::nearbyint(out_.seconds * 1e9));
  const double t1 = t0 + static_cast<double>(forward_ns) / 1e9;
  instance.clock = t1;
  instance.stalled = post.output_len.empty();  // no row ran on any rank
  // a pass that only admitted reservations ran nothing and took no time: not a step
  if (!(instance.stalled && post.left.empty() && plan->preempted.empty())) {
    const StepTimes times{start, sched_call_ns, forward_ns, 0, end - post_start, end - start};
    const int64_t flush_ns = hooks_.before_record(static_cast<size_t>(&instance - &instances_[0]));
    instance.log->record(*plan, post, RecordedTimes{t0, t1, times, flush_ns}, out_.costs.ranks);
    ++steps_;
    stepped_ = true;
  }
  if (instance.prefill) {
    for (const SeqRecord& left : post.left) {
      prefill_router_.prefilled(instance.index, requests_.prompt_len[left.seq_id]);
      if (left.status == SeqStatus::kRejected) {
        ++done_;
        ended(left.seq_id, t1);
      } else {
        handed_off(instance, left, t0, t1);
      }
    }
    return;
  }
  done_ += static_cast<int64_t>(post.left.size());
  for (const SeqRecord& left : post.left) ended(left.seq_id, t1);
  std::vector<int64_t> admitted;
  auto& pending = instance.pending;
  pending.erase(std::remove_if(pending.begin(), pending.end(),
                               [&](int64_t id) {
                                 const bool running =
                                     instance.scheduler->seq(id).status == SeqStatus::kRunning;
                                 if (running) admitted.push_back(id);
                                 return running;
                               }),
                pending.end());
  for (int64_t id : admitted) start_transfer(id, t0);
}

// The prefill of `left` ended in the step [t0, t1]: it asks for decode room when its KV
// can start to move (the last chunk's first layer done, layerwise; else the step's end).
void PdReplay::handed_off(PdInstance& instance, const SeqRecord& left, double t0, double t1) {
  const int64_t id = left.seq_id;
  const double nbytes = static_cast<double>(requests_.prompt_len[id]) * service_.kv_bytes_per_token;
  PdColumns& pd = instance.log->handed(id);
  pd.kv_bytes = nbytes;
  pd.handoff_s = t1;
  const double asked = service_.layerwise ? t0 + (t1 - t0) / service_.layers : t1;
  Handoff& h = handoffs_[id];
  h.prefill = &instance;
  h.sender = device_key(true, instance.index, left.dp_rank);
  h.nbytes = nbytes;
  h.asked_s = asked;
  h.prefill_end_s = t1;
  events_.emplace(asked, kHandoff, order_++, id);
}

void PdReplay::route_decode(int64_t seq_id, double t) {
  free_.clear();
  if (decode_router_.wants_free_blocks())
    for (PdInstance* d : decode_) {
      // free blocks, less the prompt blocks of the sequences not yet admitted
      int64_t room = 0;
      for (int64_t r = 0; r < d->scheduler->config().dp_size; ++r)
        room += d->scheduler->num_free_blocks(r);
      prompt_lens_.clear();
      for (int64_t id : d->pending) prompt_lens_.push_back(requests_.prompt_len[id]);
      free_.push_back(room - awaited_blocks(prompt_lens_, d->scheduler->config().block_size));
    }
  PdInstance& instance = *decode_[decode_router_.route(free_)];
  Handoff& h = handoffs_.at(seq_id);
  h.prefill->log->handed(seq_id).decode_instance = static_cast<int32_t>(instance.index);
  h.decode = &instance;
  h.added = instance.scheduler->add_sequence(seq_id, requests_.prompt_len[seq_id],
                                             requests_.max_new_tokens[seq_id], t, {}, 0, true,
                                             turns_ ? requests_.sessions.session_id[seq_id] : -1);
  if (h.added.status != SeqStatus::kWaiting) {  // rejected, or done on arrival: one token,
    // sampled at the end of its prefill step (layerwise, it asked for room before), no KV
    const bool done = h.added.status == SeqStatus::kFinished;
    const double at = done ? std::max(t, h.prefill_end_s) : t;
    instance.log->enqueue(h.added, at, *h.prefill->log);
    ++done_;
    ended(seq_id, at);
    handoffs_.erase(seq_id);
    return;
  }
  instance.pending.push_back(seq_id);
  wake(instance, t);
}

void PdReplay::start_transfer(int64_t seq_id, double t) {
  Handoff& h = handoffs_.at(seq_id);
  PdColumns& pd = h.prefill->log->handed(seq_id);
  pd.transfer_start_s = t;
  pd.decode_wait_s = t - h.asked_s;
  const double rate =
      links_.start(seq_id, h.sender, device_key(false, h.decode->index, h.added.dp_rank), h.nbytes,
                   service_.sender_bps, service_.receiver_bps, t);
  // layerwise, the last layer moves after the prefill step, at the share it starts at
  h.not_before_s = h.prefill_end_s + (service_.layerwise ? h.nbytes / service_.layers / rate : 0.0);
}

void PdReplay::transferred(int64_t seq_id, double t) {
  links_.finish(seq_id, t);
  const Handoff& h = handoffs_.at(seq_id);
  events_.emplace(std::max(t, h.not_before_s) + service_.latency_s, kKvArrived, order_++, seq_id);
}

void PdReplay::kv_arrived(int64_t seq_id, double t) {
  const Handoff h = handoffs_.at(seq_id);
  handoffs_.erase(seq_id);
  h.prefill->log->handed(seq_id).transfer_end_s = t;
  h.decode->scheduler->kv_arrived(seq_id);
  h.decode->log->enqueue(h.added, t, *h.prefill->log);
  wake(*h.decode, t);
}

}  // namespace steptrace
