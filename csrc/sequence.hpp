// One request's counters (docs/scheduling.md).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace steptrace {

enum class SeqStatus : uint8_t { kWaiting, kRunning, kFinished, kRejected };

struct alignas(64) Sequence {
  // Hot fields fill the first cache line; seq_id opens the next (read once per row).
  int32_t prompt_len = 0;       // P
  int32_t max_new_tokens = 0;   // M
  int32_t num_tokens = 0;       // prompt + committed generated tokens
  int32_t num_cached = 0;       // tokens whose KV is written and committed
  int32_t num_inflight = 0;     // tokens handed to forwards not yet post-processed
  int32_t inflight_samples = 0; // in-flight steps that will sample (final chunks, decodes)
  int32_t footprint = 0;        // most tokens whose KV this sequence can ever hold
  int32_t order = 0;            // position in add order: queue and tie-break order; -1: a
                      // vacant slot, whose sequence has left (retain_finished off)
  std::vector<int32_t> blocks;
  SeqStatus status = SeqStatus::kWaiting;
  bool kv_pending = false;  // KV in transfer (completion engine): computes nothing
  int32_t prefill_target = 0;  // P, or num_tokens when re-admitted after preemption

  int64_t seq_id = 0;
  // Changes with every change to `blocks`, unique across the scheduler's sequences: a
  // block-table row marked with it holds exactly this list (Batch::row_marks).
  uint64_t blocks_version = 0;
  double arrival_time = 0.0;  // recorded, never used for ordering
  int32_t dp_rank = 0;
  int32_t num_preemptions = 0;
  int64_t recomputed_tokens = 0;
  int32_t member_pos = -1;  // index in its rank's unfinished list, -1 when finished
  std::string reason;  // why it was rejected
  std::vector<int64_t> block_hashes;  // [i] identifies the prompt's first i + 1 full blocks
  int32_t num_indexed = 0;  // leading prompt blocks offered to the prefix index
  int32_t prefix_hit_tokens = 0;  // prompt tokens whose KV came from shared blocks
  int64_t session_id = -1;  // the session whose turn it is, -1: none

  int32_t output_len() const { return num_tokens - prompt_len; }
};

const char* status_name(SeqStatus s);

}  // namespace steptrace
