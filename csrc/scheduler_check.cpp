// The scheduler's invariants, checked from inside (STEPTRACE_CHECKS builds): O(slots +
// blocks) per call, run after every schedule() and postprocess().
#include <string>
#include <vector>

#include "check.hpp"
#include "scheduler.hpp"

namespace steptrace {

void Scheduler::check_invariants() const {
  if constexpr (!kChecks) return;
  std::vector<std::vector<int32_t>> owners(ranks_.size(),
                                           std::vector<int32_t>(config_.num_kv_blocks, 0));
  size_t live = 0;
  for (size_t i = 0; i < seqs_.size(); ++i) {
    const Sequence& s = seqs_[i];
    if (s.order < 0) continue;  // vacant
    ++live;
    STEPTRACE_CHECK(
        !s.kv_pending || ((s.status == SeqStatus::kWaiting || s.status == SeqStatus::kRunning) &&
                          s.num_inflight == 0),
        "sequence " + std::to_string(s.seq_id) + " awaits its KV while " + status_name(s.status) +
            " with " + std::to_string(s.num_inflight) + " tokens in flight");
    auto it = index_.find(s.seq_id);
    STEPTRACE_CHECK(it != index_.end() && it->second == static_cast<int32_t>(i),
                    "sequence " + std::to_string(s.seq_id) + " at slot " + std::to_string(i) +
                        " is mapped to slot " +
                        (it == index_.end() ? std::string("none") : std::to_string(it->second)));
    for (int32_t block : s.blocks) {
      STEPTRACE_CHECK(block >= 0 && block < config_.num_kv_blocks,
                      "sequence " + std::to_string(s.seq_id) + " owns block " +
                          std::to_string(block) + " of " + std::to_string(config_.num_kv_blocks));
      ++owners[s.dp_rank][block];
    }
  }
  STEPTRACE_CHECK(live == index_.size() && live + free_slots_.size() == seqs_.size(),
                  std::to_string(live) + " live slots, " + std::to_string(index_.size()) +
                      " ids, " + std::to_string(free_slots_.size()) + " vacant of " +
                      std::to_string(seqs_.size()));
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Rank& rank = ranks_[r];
    rank.pool.check(owners[r]);
    // A list said to be in decode order is: running sequences, each after its predecessor.
    const bool longest_first = config_.preempt_order == PreemptOrder::kLongestOutput;
    for (size_t k = 0; rank.decode_sorted && k < rank.decoding.size(); ++k) {
      const Sequence& s = seqs_.at(rank.decoding[k]);
      const Sequence* prev = k > 0 ? &seqs_.at(rank.decoding[k - 1]) : nullptr;
      const bool in_order = !prev || (prev->output_len() != s.output_len()
                                          ? (prev->output_len() > s.output_len()) == longest_first
                                          : prev->order < s.order);
      STEPTRACE_CHECK(s.status == SeqStatus::kRunning && in_order,
                      "rank " + std::to_string(r) + " decode list, said to be in order, has " +
                          std::to_string(s.seq_id) + " (" + status_name(s.status) + ", output " +
                          std::to_string(s.output_len()) + ") at " + std::to_string(k));
    }
    for (size_t k = 0; k < rank.members.size(); ++k) {
      const Sequence& s = seqs_.at(rank.members[k]);
      STEPTRACE_CHECK(
          s.member_pos == static_cast<int32_t>(k) && s.dp_rank == static_cast<int32_t>(r),
          "rank " + std::to_string(r) + " member " + std::to_string(k) + " is sequence " +
              std::to_string(s.seq_id) + " with member_pos " + std::to_string(s.member_pos) +
              " on rank " + std::to_string(s.dp_rank));
    }
  }
}

// Every row names the live sequence in its slot.
void Scheduler::check_rows(const ScheduleOutput& plan) const {
  for (const Batch& batch : plan.batches)
    for (size_t j = 0; j < batch.rows(); ++j) {
      const int32_t idx = batch.seq_index[j];
      STEPTRACE_CHECK(idx >= 0 && static_cast<size_t>(idx) < seqs_.size() &&
                          seqs_[idx].order >= 0 && seqs_[idx].seq_id == batch.seq_ids[j],
                      "row " + std::to_string(j) + " of rank " + std::to_string(batch.rank) +
                          " names sequence " + std::to_string(batch.seq_ids[j]) + " at slot " +
                          std::to_string(idx) + " of " + std::to_string(seqs_.size()));
    }
}

// A row its mark says is up to date holds the sequence's blocks, -1 padded.
void Scheduler::check_table_row(const int32_t* row, const Sequence& s, int32_t width) {
  for (int32_t k = 0; k < width; ++k) {
    const int32_t want = k < static_cast<int32_t>(s.blocks.size()) ? s.blocks[k] : -1;
    STEPTRACE_CHECK(row[k] == want, "block-table row of sequence " + std::to_string(s.seq_id) +
                                        " (blocks version " + std::to_string(s.blocks_version) +
                                        ") holds " + std::to_string(row[k]) + " at " +
                                        std::to_string(k) + ", not " + std::to_string(want));
  }
}

}  // namespace steptrace
