// The output contract of one schedule() call: one batch per DP rank, as flat arrays that
// the binding hands to numpy without copying.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace steptrace {

enum class Phase : uint8_t { kPrompt, kDecode };

// What a scheduled row computes (engine.plan.KIND_*).
enum RowKind : int8_t { kPrefillChunk = 0, kFinalChunk = 1, kDecodeStep = 2 };

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
  int32_t num_free_blocks = 0;        // rank state after this round
  int32_t num_waiting = 0;
  int32_t num_running = 0;

  bool empty() const { return seq_ids.empty(); }
  size_t rows() const { return seq_ids.size(); }

  // Rows are written by index into columns sized for an upper bound, then cut to size:
  // cheaper than six push_backs per row on a 1024-row decode batch.
  // A recycled plan's batch starts again from row 0, its buffers kept.
  void open_rows(size_t bound) {
    resize_rows(bound);
    written = 0;
    table_width = 0;
  }
  void add_row(int64_t seq_id, int32_t index, int32_t q, int32_t padded, int32_t k,
               RowKind row_kind) {
    seq_ids[written] = seq_id;
    seqlen_q[written] = q;
    seqlen_k[written] = k;
    padded_q[written] = padded;
    seq_index[written] = index;
    kind[written] = row_kind;
    ++written;
  }
  void close_rows() { resize_rows(written); }
  // rows x table_width entries, every one to be written by the caller.
  int32_t* open_block_tables() {
    const size_t n = rows() * static_cast<size_t>(table_width);
    if (n > table_capacity) {
      block_tables.reset(new int32_t[n]);
      table_capacity = n;
    }
    return block_tables.get();
  }

 private:
  void resize_rows(size_t n) {
    seq_ids.resize(n);
    seqlen_q.resize(n);
    seqlen_k.resize(n);
    padded_q.resize(n);
    kind.resize(n);
    seq_index.resize(n);
  }
  size_t written = 0;
  size_t table_capacity = 0;
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

struct PostprocessOutput {
  std::vector<int64_t> finished;  // finished (or handed off) in this call
  int64_t discarded_tokens = 0;   // in-flight work of sequences that had already finished
};

}  // namespace steptrace
