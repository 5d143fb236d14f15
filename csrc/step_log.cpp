#include "step_log.hpp"

#include <algorithm>
#include <utility>

namespace steptrace {

RequestTimes& StepLog::request(int32_t index) {
  if (static_cast<size_t>(index) >= requests_.size()) requests_.resize(index + 1);
  return requests_[index];
}

void StepLog::enqueue(int64_t seq_id, double t) {
  const int32_t index = scheduler_.index_of(seq_id);
  RequestTimes& r = request(index);
  r.enqueue_s = t;
  const int32_t output_len = scheduler_.at(index).output_len();
  if (output_len > r.tokens) stamp(r, output_len, t);
  // A completion engine's one-token request is done on arrival: no plan will report it.
  if (scheduler_.at(index).status == SeqStatus::kFinished) ++num_done_;
}

// Stamps the tokens committed since the last look at this sequence (output_len > r.tokens;
// discarded in-flight work commits nothing and is never stamped).
void StepLog::stamp(RequestTimes& r, int32_t now, double t) {
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

size_t StepLog::record(const ScheduleOutput& plan, const PostprocessOutput& post,
                       const StepTimes& times, const std::vector<RankCost>& costs) {
  const double t_start = times.t_start_s, t_end = times.t_end_s;
  const bool warmup = plan.step < warmup_steps_;
  if (requests_.size() < scheduler_.num_sequences()) requests_.resize(scheduler_.num_sequences());
  RequestTimes* const requests = requests_.data();  // every row's index is below the size
  for (size_t r = 0; r < plan.batches.size(); ++r) {
    const Batch& b = plan.batches[r];
    int64_t tokens_q = 0, padded = 0, sum_k = 0;
    int32_t max_k = 0;
    for (size_t j = 0; j < b.rows(); ++j) {
      tokens_q += b.seqlen_q[j];
      padded += b.padded_q[j];
      sum_k += b.seqlen_k[j];
      max_k = std::max(max_k, b.seqlen_k[j]);
      const int32_t index = b.seq_index[j];
      RequestTimes& req = requests[index];
      if (req.first_scheduled_step < 0) {
        req.first_scheduled_step = plan.step;
        req.first_scheduled_s = t_start;
      }
      if (b.kind[j] == kPrefillChunk) continue;
      const int32_t output_len = scheduler_.at(index).output_len();
      if (output_len > req.tokens) stamp(req, output_len, t_end);
    }
    steps_.step.push_back(plan.step);
    steps_.dp_rank.push_back(b.rank);
    steps_.prompt_phase.push_back(plan.phase == Phase::kPrompt);
    steps_.empty.push_back(b.empty());
    steps_.warmup.push_back(warmup);
    steps_.num_seqs.push_back(static_cast<int32_t>(b.rows()));
    steps_.tokens_q.push_back(tokens_q);
    steps_.padded_tokens_q.push_back(padded);
    steps_.sum_seqlen_k.push_back(sum_k);
    steps_.max_seqlen_k.push_back(max_k);
    steps_.preempted.push_back(static_cast<int32_t>(plan.preempted.size()));
    steps_.rejected.push_back(static_cast<int32_t>(plan.rejected.size()));
    steps_.finished.push_back(static_cast<int32_t>(post.finished.size()));
    steps_.discarded_tokens.push_back(post.discarded_tokens);
    steps_.kv_blocks_free.push_back(b.num_free_blocks);
    steps_.waiting.push_back(b.num_waiting);
    steps_.running.push_back(b.num_running);
    steps_.sched_cpp_ns.push_back(plan.sched_ns);
    steps_.t_start_s.push_back(t_start);
    steps_.t_end_s.push_back(t_end);
    steps_.sched_call_ns.push_back(times.sched_call_ns);
    steps_.forward_ns.push_back(times.forward_ns);
    steps_.sample_ns.push_back(times.sample_ns);
    steps_.postprocess_ns.push_back(times.postprocess_ns);
    steps_.step_ns.push_back(times.step_ns);
    steps_.model_flops.push_back(costs[r].model_flops);
    steps_.executed_flops.push_back(costs[r].executed_flops);
    steps_.bytes.push_back(costs[r].bytes);

    batches_.step.insert(batches_.step.end(), b.rows(), plan.step);
    batches_.dp_rank.insert(batches_.dp_rank.end(), b.rows(), b.rank);
    batches_.seq_id.insert(batches_.seq_id.end(), b.seq_ids.begin(), b.seq_ids.end());
    batches_.kind.insert(batches_.kind.end(), b.kind.begin(), b.kind.end());
    batches_.seqlen_q.insert(batches_.seqlen_q.end(), b.seqlen_q.begin(), b.seqlen_q.end());
    batches_.seqlen_k.insert(batches_.seqlen_k.end(), b.seqlen_k.begin(), b.seqlen_k.end());
  }
  num_done_ += static_cast<int64_t>(post.finished.size() + plan.rejected.size());
  end_run();
  for (int64_t seq_id : post.finished)  // its gaps are counted for good
    std::vector<double>().swap(request(scheduler_.index_of(seq_id)).gaps);
  return steps_.step.size() / plan.batches.size();
}

std::vector<std::pair<double, int64_t>> StepLog::itl() const {
  std::unordered_map<double, int64_t> counts = itl_;
  counts[0.0] += zero_gaps_;
  for (const RequestTimes& r : requests_)  // never completed: out of the distribution
    for (double gap : r.gaps) --counts[gap];
  std::vector<std::pair<double, int64_t>> out;
  for (const auto& [gap, count] : counts)
    if (count > 0) out.emplace_back(gap, count);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace steptrace
