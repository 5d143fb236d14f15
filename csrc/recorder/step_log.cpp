#include "step_log.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace steptrace {

namespace {

[[noreturn]] void bad_arg(const std::string& message) { throw std::invalid_argument(message); }

}  // namespace

void StepLog::enqueue(const SeqRecord& added, double t) {
  if (owner_ != 0 && added.owner != owner_)
    bad_arg("request " + std::to_string(added.seq_id) +
            " was added to another scheduler than the requests and plans recorded before it");
  if (live_.count(added.seq_id))
    bad_arg("request " + std::to_string(added.seq_id) + " was enqueued twice");
  owner_ = added.owner;
  LiveRequest r;
  r.enqueue_s = t;
  r.added = added;
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

void StepLog::record(const ScheduleOutput& plan, const PostprocessOutput& post,
                     const StepTimes& times, const std::vector<StepCost>& costs) {
  check(plan, post, costs);
  record_step(plan, post, times);
  size_t row = 0;  // the plan's rows, rank after rank: post.output_len's order
  for (size_t r = 0; r < plan.batches.size(); ++r)
    row = record_rank(plan, post, times, plan.batches[r], costs[r], row);
  const auto none = live_.end();
  for (int64_t seq_id : plan.preempted) {
    const auto it = live_.find(seq_id);
    if (it != none) ++it->second.preemptions;
  }
  end_run();
  for (const SeqRecord& left : post.left) {  // its gaps are counted for good
    const auto it = live_.find(left.seq_id);
    if (it == none) continue;  // never enqueued here
    leave(left.seq_id, it->second, left,
          left.status == SeqStatus::kRejected ? kEndRejected : kEndFinished);
    live_.erase(it);
  }
}

// The step's own values, the same on every rank's row.
void StepLog::record_step(const ScheduleOutput& plan, const PostprocessOutput& post,
                          const StepTimes& times) {
  const size_t ranks = plan.batches.size();
  const auto each = [ranks](auto& column, auto value) {
    column.insert(column.end(), ranks, value);
  };
  each(steps_.step, plan.step);
  each(steps_.prompt_phase, uint8_t{plan.phase == Phase::kPrompt});
  each(steps_.warmup, uint8_t{plan.step < warmup_steps_});
  each(steps_.preempted, static_cast<int32_t>(plan.preempted.size()));
  each(steps_.rejected, static_cast<int32_t>(plan.rejected.size()));
  each(steps_.finished, static_cast<int32_t>(post.finished.size()));
  each(steps_.discarded_tokens, post.discarded_tokens);
  each(steps_.sched_cpp_ns, plan.sched_ns);
  each(steps_.t_start_s, times.t_start_s);
  each(steps_.t_end_s, times.t_end_s);
  each(steps_.sched_call_ns, times.sched_call_ns);
  each(steps_.forward_ns, times.forward_ns);
  each(steps_.sample_ns, times.sample_ns);
  each(steps_.postprocess_ns, times.postprocess_ns);
  each(steps_.step_ns, times.step_ns);
  each(steps_.flush_ns, times.flush_ns);
}

// A rank's values: its row of the step, its batch rows, its live requests' first schedule
// and tokens. Returns the plan's row after this rank's.
size_t StepLog::record_rank(const ScheduleOutput& plan, const PostprocessOutput& post,
                            const StepTimes& times, const Batch& b, const StepCost& cost,
                            size_t row) {
  const auto none = live_.end();
  int64_t tokens_q = 0, padded = 0, sum_k = 0;
  int32_t max_k = 0;
  for (size_t j = 0; j < b.rows(); ++j, ++row) {
    tokens_q += b.seqlen_q[j];
    padded += b.padded_q[j];
    sum_k += b.seqlen_k[j];
    max_k = std::max(max_k, b.seqlen_k[j]);
    // Not live: never enqueued, or already left (in-flight work of a finished sequence).
    const auto it = live_.find(b.seq_ids[j]);
    if (it == none) continue;
    LiveRequest& req = it->second;
    if (req.first_scheduled_step < 0) {
      req.first_scheduled_step = plan.step;
      req.first_scheduled_s = times.t_start_s;
    }
    if (b.kind[j] == kChunk) continue;
    if (post.output_len[row] > req.tokens) stamp(req, post.output_len[row], times.t_end_s);
  }
  steps_.dp_rank.push_back(b.rank);
  steps_.empty.push_back(b.empty());
  steps_.num_seqs.push_back(static_cast<int32_t>(b.rows()));
  steps_.tokens_q.push_back(tokens_q);
  steps_.padded_tokens_q.push_back(padded);
  steps_.sum_seqlen_k.push_back(sum_k);
  steps_.max_seqlen_k.push_back(max_k);
  record_rank_state(b, cost);
  if (!b.empty()) record_batch(plan.step, b);
  return row;
}

// The rank's pool and queues after planning, and its costs.
void StepLog::record_rank_state(const Batch& b, const StepCost& cost) {
  steps_.kv_blocks_free.push_back(b.num_free_blocks);
  steps_.waiting.push_back(b.num_waiting);
  steps_.running.push_back(b.num_running);
  steps_.prefix_hit_tokens.push_back(b.num_hit_tokens);
  steps_.kv_blocks_evicted.push_back(b.num_evicted_blocks);
  steps_.kv_blocks_retained.push_back(b.num_retained_blocks);
  steps_.model_flops.push_back(cost.model_flops);
  steps_.executed_flops.push_back(cost.executed_flops);
  steps_.bytes.push_back(cost.bytes);
  steps_.attention_s.push_back(cost.attention_s);
  steps_.dense_s.push_back(cost.dense_s);
  steps_.experts_s.push_back(cost.experts_s);
  steps_.dispatch_s.push_back(cost.dispatch_s);
  steps_.combine_s.push_back(cost.combine_s);
  steps_.allreduce_s.push_back(cost.allreduce_s);
}

void StepLog::record_batch(int64_t step, const Batch& b) {
  batches_.step.insert(batches_.step.end(), b.rows(), step);
  batches_.dp_rank.insert(batches_.dp_rank.end(), b.rows(), b.rank);
  batches_.seq_id.insert(batches_.seq_id.end(), b.seq_ids.begin(), b.seq_ids.end());
  batches_.kind.insert(batches_.kind.end(), b.kind.begin(), b.kind.end());
  batches_.seqlen_q.insert(batches_.seqlen_q.end(), b.seqlen_q.begin(), b.seqlen_q.end());
  batches_.seqlen_k.insert(batches_.seqlen_k.end(), b.seqlen_k.begin(), b.seqlen_k.end());
}

void StepLog::leave(int64_t seq_id, const LiveRequest& r, const SeqRecord& left, RequestEnd end) {
  requests_.request_id.push_back(seq_id);
  requests_.enqueue_s.push_back(r.enqueue_s);
  requests_.first_scheduled_s.push_back(r.first_scheduled_s);
  requests_.first_token_s.push_back(r.first_token_s);
  requests_.last_token_s.push_back(r.last_token_s);
  requests_.first_scheduled_step.push_back(r.first_scheduled_step);
  requests_.output_tokens.push_back(end == kEndUnfinished ? r.tokens : left.output_len);
  requests_.dp_rank.push_back(left.dp_rank);
  requests_.preemptions.push_back(end == kEndUnfinished ? r.preemptions : left.num_preemptions);
  requests_.recomputed_tokens.push_back(left.recomputed_tokens);
  requests_.prefix_hit_tokens.push_back(left.prefix_hit_tokens);
  requests_.status.push_back(end);
  requests_.reason.push_back(left.reason);
  if (end != kEndUnfinished) ++num_done_;
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
