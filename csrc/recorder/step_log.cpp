#include "step_log.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace steptrace {

namespace {

[[noreturn]] void bad_arg(const std::string& message) { throw std::invalid_argument(message); }

// Scheduled nothing and holds no sequence, running or waiting.
bool idle(const Batch& b) { return b.empty() && b.num_running == 0 && b.num_waiting == 0; }

constexpr int kTimes = 7;  // a cost's times: its parts and rank_s

void times_of(const StepCost& c, double (&out)[kTimes]) {
  const double t[kTimes] = {c.attention_s, c.dense_s,     c.experts_s, c.dispatch_s,
                            c.combine_s,   c.allreduce_s, c.rank_s};
  std::copy(t, t + kTimes, out);
}

}  // namespace

StepLog::StepLog(int64_t warmup_steps, Handoffs handoff, int32_t instance)
    : warmup_steps_(warmup_steps), handoff_(handoff) {
  own_.prefill_instance = instance;
  if (handoff != Handoffs::kKept) own_.decode_instance = instance;
}

void StepLog::enqueue(const SeqRecord& added, double t, StepLog& from) {
  const auto it = from.handed_.find(added.seq_id);
  if (&from == this || it == from.handed_.end())
    bad_arg("request " + std::to_string(added.seq_id) +
            " was not handed off by the prefill instance's log it is taken from");
  take_in(added, t, std::make_unique<Handed>(it->second));
  from.handed_.erase(it);
}

PdColumns& StepLog::handed(int64_t seq_id) {
  const auto it = handed_.find(seq_id);
  if (it == handed_.end())
    throw std::out_of_range("request " + std::to_string(seq_id) +
                            " is not waiting in this log, handed off");
  return it->second.pd;
}

void StepLog::enqueue(const SeqRecord& added, double t) { take_in(added, t, nullptr); }

void StepLog::take_in(const SeqRecord& added, double t, std::unique_ptr<Handed> handed) {
  if (owner_ != 0 && added.owner != owner_)
    bad_arg("request " + std::to_string(added.seq_id) +
            " was added to another scheduler than the requests and plans recorded before it");
  if (live_.count(added.seq_id))
    bad_arg("request " + std::to_string(added.seq_id) + " was enqueued twice");
  owner_ = added.owner;
  LiveRequest r;
  r.enqueue_s = t;
  r.added = added;
  r.handed = std::move(handed);
  if (added.output_len > 0) stamp(r, added.output_len, t);
  // A completion engine's one-token request is done on arrival: no plan will report it.
  if (added.status == SeqStatus::kFinished) {
    leave(added.seq_id, r, added, kEndFinished);
    return;
  }
  live_.emplace(added.seq_id, std::move(r));
}

// Stamps the tokens committed since the last look at this sequence (output_len > r.tokens;
// discarded in-flight work commits nothing and is never stamped).
void StepLog::stamp(LiveRequest& r, int32_t now, double t) {
  if (r.tokens == 0) r.first_token_s = t;
  if (r.first_scheduled_step >= warmup_steps_) {
    if (r.tokens > 0) {
      const double gap = t - r.last_token_s;
      add_gap(gap);
      r.gaps.push_back(gap);
    }
    const int32_t drafts = now - r.tokens - 1;  // accepted drafts: the same instant
    zero_gaps_ += drafts;
    r.gaps.insert(r.gaps.end(), drafts, 0.0);
  }
  r.last_token_s = t;
  r.tokens = now;
}

void StepLog::add_gap(double gap) {
  if (run_count_ > 0 && gap != run_gap_) end_run();
  run_gap_ = gap;
  ++run_count_;
}

void StepLog::end_run() {
  if (run_count_ > 0) itl_[run_gap_] += run_count_;
  run_count_ = 0;
}

void StepLog::check(const ScheduleOutput& plan, const PostprocessOutput& post,
                    const std::vector<StepCost>& costs) {
  if (post.owner != plan.owner || post.step != plan.step)
    bad_arg("the postprocess result of plan " + std::to_string(post.step) +
            " was recorded with plan " + std::to_string(plan.step) +
            (post.owner == plan.owner ? "" : " of another scheduler"));
  if (owner_ != 0 && plan.owner != owner_)
    bad_arg("plan " + std::to_string(plan.step) +
            " comes from another scheduler than the requests and plans recorded before it");
  size_t rows = 0;
  for (const Batch& b : plan.batches) rows += b.rows();
  if (post.output_len.size() != rows)
    bad_arg("the postprocess result has " + std::to_string(post.output_len.size()) +
            " rows; plan " + std::to_string(plan.step) + " scheduled " + std::to_string(rows));
  if (costs.size() != plan.batches.size())
    bad_arg("flops has " + std::to_string(costs.size()) + " ranks; the plan has " +
            std::to_string(plan.batches.size()));
  owner_ = plan.owner;
}

// Which ranks of the step get a row (written_), and the step's aggregates over all of them.
// A busy rank always has one; an idle rank only where it holds a time larger than the rows
// before it (a part, rank_s) or an extrapolated bit they lack. So the written rows keep
// every part's and rank_s's maximum over the step's ranks and all its extrapolated bits,
// and a step with no busy rank keeps its first rank's row.
StepRanks StepLog::written_rows(const ScheduleOutput& plan, const std::vector<StepCost>& costs) {
  const size_t ranks = plan.batches.size();
  StepRanks all;
  written_.assign(ranks, 0);
  double most[kTimes], t[kTimes];
  std::fill(most, most + kTimes, -std::numeric_limits<double>::infinity());
  uint8_t bits = 0;
  const auto write = [&](size_t r) {
    written_[r] = 1;
    times_of(costs[r], t);
    for (int i = 0; i < kTimes; ++i) most[i] = std::max(most[i], t[i]);
    bits |= costs[r].extrapolated;
  };
  double sum = 0;
  for (size_t r = 0; r < ranks; ++r) {
    sum += costs[r].rank_s;
    all.slowest_rank_s = std::max(all.slowest_rank_s, costs[r].rank_s);
    if (!idle(plan.batches[r])) write(r);
  }
  const double n = static_cast<double>(ranks);
  all.mean_rank_s = ranks > 0 ? sum / n : 0;
  if (sum > 0) all.dp_imbalance = all.slowest_rank_s * n / sum;
  for (size_t r = 0; r < ranks; ++r) {
    if (written_[r]) continue;
    times_of(costs[r], t);
    bool adds = (costs[r].extrapolated & ~bits) != 0;
    for (int i = 0; i < kTimes; ++i) adds = adds || t[i] > most[i];
    if (adds) {
      write(r);
    } else {
      ++all.idle_ranks;
      all.idle_kv_blocks_free += plan.batches[r].kv_blocks_free;
    }
  }
  return all;
}

void StepLog::record(const ScheduleOutput& plan, const PostprocessOutput& post,
                     const RecordedTimes& times, const std::vector<StepCost>& costs) {
  check(plan, post, costs);
  const StepRanks all = written_rows(plan, costs);
  record_step(plan, post, times, all, plan.batches.size() - static_cast<size_t>(all.idle_ranks));
  size_t row = 0;  // the plan's rows, rank after rank: post.output_len's order
  for (size_t r = 0; r < plan.batches.size(); ++r)
    row = record_rank(plan, post, times, plan.batches[r], costs[r], row, written_[r] != 0);
  const auto none = live_.end();
  for (int64_t seq_id : plan.preempted) {
    const auto it = live_.find(seq_id);
    if (it == none) continue;
    LiveRequest& req = it->second;
    ++req.preemptions;
    // It stops decoding as this step begins: recomputed from here, not stalled.
    if (!std::isnan(req.stall_mark)) req.decode_stall_s += busy_s_ - req.stall_mark;
    req.stall_mark = LiveRequest::kNever;
  }
  busy_s_ += times.t_end_s - times.t_start_s;
  end_run();
  for (const SeqRecord& left : post.left) {  // its gaps are counted for good
    const auto it = live_.find(left.seq_id);
    if (it == none) continue;  // never enqueued here
    leave(left.seq_id, it->second, left,
          left.status == SeqStatus::kRejected ? kEndRejected : kEndFinished);
    live_.erase(it);
  }
}

// The steps table's STEP and RANK columns (columns.hpp), each written where its value is.
#define STEPTRACE_WHEN_STEP_STEP(x) x
#define STEPTRACE_WHEN_STEP_RANK(x)
#define STEPTRACE_WHEN_RANK_STEP(x)
#define STEPTRACE_WHEN_RANK_RANK(x) x

// The step's own values, the same on each of its `rows` rows.
void StepLog::record_step(const ScheduleOutput& plan, const PostprocessOutput& post,
                          const RecordedTimes& times, const StepRanks& all, size_t rows) {
  const auto each = [rows](auto& column, auto value) { column.insert(column.end(), rows, value); };
#define STEPTRACE_WRITE(type, name, part, value) \
  STEPTRACE_WHEN_STEP_##part(each(steps_.name, static_cast<type>(value));)
  STEPTRACE_STEP_COLUMNS(STEPTRACE_WRITE)
#undef STEPTRACE_WRITE
}

// A rank's values: its row of the step (if `written`), its batch rows, its live requests'
// first schedule and tokens. Returns the plan's row after this rank's.
size_t StepLog::record_rank(const ScheduleOutput& plan, const PostprocessOutput& post,
                            const RecordedTimes& times, const Batch& b, const StepCost& cost,
                            size_t row, bool written) {
  const auto none = live_.end();
  const double before = busy_s_, after = busy_s_ + (times.t_end_s - times.t_start_s);
  RankSums sums;
  for (size_t j = 0; j < b.rows(); ++j, ++row) {
    sums.tokens_q += b.seqlen_q[j];
    sums.padded_q += b.padded_q[j];
    if (b.kind[j] != kDecode) sums.prefill_q += b.seqlen_q[j];
    sums.sum_seqlen_k += b.seqlen_k[j];
    sums.max_seqlen_k = std::max(sums.max_seqlen_k, b.seqlen_k[j]);
    // Not live: never enqueued, or already left (in-flight work of a finished sequence).
    const auto it = live_.find(b.seq_ids[j]);
    if (it == none) continue;
    LiveRequest& req = it->second;
    if (req.first_scheduled_step < 0) {
      req.first_scheduled_step = plan.step;
      req.first_scheduled_s = times.t_start_s;
    }
    if (!std::isnan(req.stall_mark)) {  // decoding, and this step advances it
      req.decode_stall_s += before - req.stall_mark;
      req.stall_mark = after;
    }
    if (b.kind[j] == kChunk) continue;
    if (post.output_len[row] > req.tokens) {
      stamp(req, post.output_len[row], times.t_end_s);
      req.stall_mark = after;  // decoding from here, if not before
    }
  }
  if (written) {
#define STEPTRACE_WRITE(type, name, part, value) \
  STEPTRACE_WHEN_RANK_##part(steps_.name.push_back(static_cast<type>(value));)
    STEPTRACE_STEP_COLUMNS(STEPTRACE_WRITE)
#undef STEPTRACE_WRITE
  }
  if (!b.empty()) record_batch(plan.step, b);
  return row;
}

void StepLog::record_batch(int64_t step, const Batch& b) {
#define STEPTRACE_FILL(column, value) column.insert(column.end(), b.rows(), value)
#define STEPTRACE_COPY(column, value) column.insert(column.end(), value.begin(), value.end())
#define STEPTRACE_WRITE(type, name, how, value) STEPTRACE_##how(batches_.name, value);
  STEPTRACE_BATCH_COLUMNS(STEPTRACE_WRITE)
#undef STEPTRACE_WRITE
#undef STEPTRACE_COPY
#undef STEPTRACE_FILL
}

void StepLog::leave(int64_t seq_id, const LiveRequest& r, const SeqRecord& left, RequestEnd end) {
  // what it brought in: a P/D request's prefill side, else nothing before this instance
  const Intake here{r.enqueue_s, r.first_scheduled_s, r.first_scheduled_step, left.dp_rank,
                    left.prefix_hit_tokens};
  Intake in = r.handed ? r.handed->prefill : here;
  if (!r.handed && end == kEndFinished && handoff_ != Handoffs::kNone) {
    if (handoff_ == Handoffs::kKept) {  // its row is the decode instance's to write
      in.preemptions = left.num_preemptions;
      in.recomputed_tokens = left.recomputed_tokens;
      handed_.emplace(seq_id, Handed{in, own_});
      ++num_done_;
      return;
    }
    end = kEndHandedOff;
  }
  write(seq_id, r, left, end, in, r.handed ? r.handed->pd : own_);
  if (end != kEndUnfinished) ++num_done_;
}

void StepLog::write(int64_t seq_id, const LiveRequest& r, const SeqRecord& left, RequestEnd end,
                    const Intake& in, const PdColumns& pd) {
  const bool unfinished = end == kEndUnfinished;
  const bool decodes = handoff_ != Handoffs::kKept;
  const double stall_s =
      r.decode_stall_s + (std::isnan(r.stall_mark) ? 0.0 : busy_s_ - r.stall_mark);
#define STEPTRACE_WRITE(type, name, value) requests_.name.push_back(static_cast<type>(value));
  STEPTRACE_REQUEST_COLUMNS(STEPTRACE_WRITE)
#undef STEPTRACE_WRITE
}

void StepLog::end() {
  end_run();
  for (const auto& [seq_id, r] : live_) {
    const bool rejected = r.added.status == SeqStatus::kRejected;
    // Never completed: out of the distribution.
    for (double gap : r.gaps) --itl_[gap];
    leave(seq_id, r, r.added, rejected ? kEndRejected : kEndUnfinished);
  }
  live_.clear();
  std::vector<int64_t> stranded;
  for (const auto& [seq_id, h] : handed_) stranded.push_back(seq_id);
  std::sort(stranded.begin(), stranded.end());
  const LiveRequest none;  // no token reached the user
  for (int64_t seq_id : stranded) {
    const Handed& h = handed_.at(seq_id);
    SeqRecord left;
    left.reason = std::isnan(h.pd.transfer_start_s) ? "awaiting decode room" : "in KV transfer";
    write(seq_id, none, left, kEndUnfinished, h.prefill, h.pd);
  }
  handed_.clear();
}

std::vector<std::pair<double, int64_t>> StepLog::itl() const {
  std::unordered_map<double, int64_t> counts = itl_;
  if (run_count_ > 0) counts[run_gap_] += run_count_;
  counts[0.0] += zero_gaps_;
  for (const auto& [seq_id, r] : live_)  // not completed (yet): out of the distribution
    for (double gap : r.gaps) --counts[gap];
  std::vector<std::pair<double, int64_t>> out;
  for (const auto& [gap, count] : counts)
    if (count > 0) out.emplace_back(gap, count);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace steptrace
