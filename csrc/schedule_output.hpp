// The output contract of one schedule() call: one batch per DP rank, as flat arrays that
// the binding hands to numpy without copying.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sequence.hpp"

namespace steptrace {

enum class Phase : uint8_t { kPrompt, kDecode };

// What a scheduled row computes: engine.plan.KIND_CHUNK / KIND_FINAL / KIND_DECODE, named
// chunk / final / decode in the tables.
enum RowKind : int8_t { kChunk = 0, kFinal = 1, kDecode = 2 };

struct Batch {
  int32_t rank = 0;
  std::vector<int64_t> seq_ids;
  std::vector<int32_t> seqlen_q;  // real tokens computed
  std::vector<int32_t> seqlen_k;  // num_cached + num_inflight + seqlen_q
  std::vector<int32_t> padded_q;  // seqlen_q padded for context-parallel alignment
  std::vector<int8_t> kind;       // RowKind
  std::unique_ptr<int32_t[]> block_tables;  // row-major [rows, table_width], -1 padded
  int32_t table_width = 0;
  std::vector<int32_t> seq_index;     // the scheduler's index of each row's sequence
  int32_t kv_blocks_free = 0;         // rank state after this round
  int32_t num_waiting = 0;
  int32_t num_running = 0;
  int32_t num_hit_tokens = 0;       // prompt tokens this round's admissions found cached
  int32_t num_reloaded_blocks = 0;  // of their blocks, those reloaded from the host tier
  int32_t num_evicted_blocks = 0;   // retained blocks this round's allocations evicted
  int32_t num_retained_blocks = 0;  // free blocks still in the prefix index, after this round

  bool empty() const { return seq_ids.empty(); }
  size_t rows() const { return seq_ids.size(); }

  // Rows are written by index into columns sized for an upper bound, then cut to size:
  // cheaper than six push_backs per row on a 1024-row decode batch. The writer holds raw
  // column pointers: kept in registers, they are not reloaded after each int8 `kind`
  // store (which may alias anything). A recycled plan's batch keeps its buffers.
  struct Rows {
    int64_t* seq_ids;
    int32_t* seqlen_q;
    int32_t* seqlen_k;
    int32_t* padded_q;
    int8_t* kind;
    int32_t* seq_index;
    size_t n = 0;
    int32_t table_width = 0;  // the most blocks a written row's sequence holds

    void add(int64_t seq_id, int32_t index, int32_t q, int32_t padded, int32_t k, RowKind row_kind,
             int32_t num_blocks) {
      seq_ids[n] = seq_id;
      seqlen_q[n] = q;
      seqlen_k[n] = k;
      padded_q[n] = padded;
      seq_index[n] = index;
      kind[n] = row_kind;
      ++n;
      if (num_blocks > table_width) table_width = num_blocks;
    }
    // A decode round writes its rows' columns one at a time (Scheduler::decode_round); these
    // three are the same for every row.
    void fill_decode(int32_t q) {
      std::fill(seqlen_q, seqlen_q + n, q);
      std::fill(padded_q, padded_q + n, q);
      std::fill(kind, kind + n, kDecode);
    }
  };
  Rows open_rows(size_t bound) {
    resize_rows(bound);
    return Rows{seq_ids.data(),  seqlen_q.data(), seqlen_k.data(),
                padded_q.data(), kind.data(),     seq_index.data()};
  }
  void close_rows(const Rows& written) {
    resize_rows(written.n);
    table_width = written.table_width;
  }
  // Room for a [rows, width] table, every row to be written by the caller unless its mark
  // says it holds that already. row_marks()[j] is the Sequence::blocks_version that table row
  // j was written from (0: none), so that a recycled plan's next round writes only the rows
  // whose block list changed since. A new buffer or another width clears the marks.
  int32_t* open_block_tables(size_t rows, int32_t width) {
    const size_t n = rows * static_cast<size_t>(width);
    bool clear = width != marked_width_;
    if (n > table_capacity) {
      block_tables.reset(new int32_t[n]);
      table_capacity = n;
      clear = true;
    }
    if (rows > marks_capacity) {
      marks_.reset(new uint64_t[rows]());
      marks_capacity = rows;
    } else if (clear) {
      std::fill_n(marks_.get(), marks_capacity, uint64_t{0});
    }
    marked_width_ = width;
    return block_tables.get();
  }
  uint64_t* row_marks() { return marks_.get(); }

 private:
  void resize_rows(size_t n) {
    seq_ids.resize(n);
    seqlen_q.resize(n);
    seqlen_k.resize(n);
    padded_q.resize(n);
    kind.resize(n);
    seq_index.resize(n);
  }
  size_t table_capacity = 0;
  std::unique_ptr<uint64_t[]> marks_;
  size_t marks_capacity = 0;
  int32_t marked_width_ = 0;
};

struct ScheduleOutput {
  uint64_t owner = 0;  // the scheduler that made it
  int64_t step = 0;
  Phase phase = Phase::kDecode;
  std::vector<Batch> batches;
  std::vector<int64_t> preempted;  // in preemption order
  std::vector<int64_t> rejected;   // rejected since the previous plan
  int64_t sched_start_ns = 0;      // steady clock at entry
  int64_t sched_ns = 0;            // time spent inside schedule()
};

// What the requests table needs of a sequence, copied out when it is added and when it
// leaves the scheduler, so that nobody reads the scheduler back for it.
struct SeqRecord {
  int64_t seq_id = 0;
  int32_t dp_rank = 0;
  SeqStatus status = SeqStatus::kWaiting;
  int32_t output_len = 0;  // generated tokens (a completion engine's arrive with one)
  int32_t num_preemptions = 0;
  int64_t recomputed_tokens = 0;
  int32_t prefix_hit_tokens = 0;
  std::string reason;  // why it was rejected
  uint64_t owner = 0;  // the scheduler it was added to
};

struct PostprocessOutput {
  uint64_t owner = 0;  // the plan's: its scheduler and step
  int64_t step = 0;
  std::vector<int64_t> finished;  // finished (or handed off) in this call
  int64_t discarded_tokens = 0;   // in-flight work of sequences that had already finished
  std::vector<int32_t> output_len;  // each scheduled row's generated tokens after the call,
                                    // rank-then-batch order
  // Every sequence that left with this call: finished or handed off here (in `finished`
  // order), then those the plan reported rejected (in `rejected` order).
  std::vector<SeqRecord> left;
};

}  // namespace steptrace
