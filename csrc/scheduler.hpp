// The DeepSeek-style engine scheduler; docs/scheduling.md is its contract.
//
// Invariants, after every schedule() and postprocess():
//  * on every rank, free blocks + distinct blocks owned == num_kv_blocks; a block with k
//    owners has reference count k, and only prompt blocks with a common hash prefix are
//    shared.
//  * seqlen_k == num_cached + num_inflight + seqlen_q (derived in exactly one place,
//    with the counters as they were when the plan was made).
//  * a sequence never owns more than blocks_for(footprint) blocks and footprint fits a
//    rank's pool (else it was rejected when added), so a lone sequence always progresses.
//    Draft positions past the footprint (MTP at the very end) get no KV slot: they could
//    only produce tokens beyond max_new_tokens, which are discarded.
//  * a prompt round charges at most max_num_batched_tokens; a rank runs at most
//    max_num_seqs sequences; each sequence is in exactly one status.
//  * with retain_finished off, a sequence that left (finished, handed off, rejected) keeps
//    its slot until every plan that could name it is post-processed; then the slot is
//    vacant (order -1), its id forgotten, and a later add_sequence reuses it.
// With STEPTRACE_CHECKS (csrc/check.hpp) check_invariants() runs after every schedule()
// and postprocess().
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "block_pool.hpp"
#include "check.hpp"
#include "config.hpp"
#include "schedule_output.hpp"
#include "sequence.hpp"

namespace steptrace {

// seq() of an id the scheduler no longer holds, with retain_finished off (KeyError in Python).
struct SequenceLeft : std::out_of_range {
  using std::out_of_range::out_of_range;
};

class Scheduler {
 public:
  // retain_finished: keep every sequence that left, for seq() (the default); off, their
  // state is released and their slots reused (memory bounded by what is live).
  explicit Scheduler(const SchedulerConfig& config, bool retain_finished = true);

  // hash_ids[i] identifies the prompt's first (i + 1) * hash_block_size tokens (prefix
  // caching; csrc/block_hashes.hpp); may be empty. hash_block_size 0 is block_size.
  // kv_transfer (completion engine only): its KV is still in transfer; admission reserves
  // its blocks, and it decodes once kv_arrived() is called.
  // session_id: the session whose turn it is (-1: none), for dp_assign session_affinity.
  // Returns the sequence as added: waiting, finished (a completion engine's one-token
  // request) or rejected.
  SeqRecord add_sequence(int64_t seq_id, int64_t prompt_len, int64_t max_new_tokens,
                         double arrival_time, const std::vector<int64_t>& hash_ids = {},
                         int64_t hash_block_size = 0, bool kv_transfer = false,
                         int64_t session_id = -1);
  // The sequence's KV transfer ended: it decodes from the next schedule().
  void kv_arrived(int64_t seq_id);
  // No turn of the session will come any more: its held blocks (session_retention) become
  // plain retained ones, and its turns' blocks are no longer held when released.
  void end_session(int64_t session_id);
  // vote: the phase agreed by all DP ranks (one all-reduce across processes); without it
  // the ranks of this scheduler vote among themselves.
  std::shared_ptr<ScheduleOutput> schedule(std::optional<Phase> vote = std::nullopt);
  // This scheduler's vote: would any of its ranks' prompt pass schedule a token?
  bool has_prompt_work() const;
  // accepted: drafts accepted per scheduled row (rank-then-batch order), or nullptr.
  PostprocessOutput postprocess(const ScheduleOutput& plan, const std::vector<int64_t>* accepted);

  const Sequence& seq(int64_t seq_id) const;
  int32_t index_of(int64_t seq_id) const;  // the index Batch::seq_index holds
  const Sequence& at(int32_t index) const {
    STEPTRACE_CHECK(
        index >= 0 && static_cast<size_t>(index) < seqs_.size(),
        "index " + std::to_string(index) + " of " + std::to_string(seqs_.size()) + " slots");
    return seqs_[index];
  }
  size_t num_sequences() const { return seqs_.size(); }  // slots, vacant ones included
  size_t num_live() const { return index_.size(); }       // sequences seq() can name
  bool retain_finished() const { return retain_finished_; }
  int32_t num_free_blocks(int64_t rank) const;
  int32_t refcount(int64_t block, int64_t rank) const;
  bool is_finished() const { return num_unfinished_ == 0 && pending_rejected_.empty(); }
  int64_t num_outstanding_plans() const { return next_step_ - next_postprocess_; }
  const SchedulerConfig& config() const { return config_; }
  // Throws std::logic_error naming the first broken invariant (csrc/scheduler_check.cpp).
  void check_invariants() const;

 private:
  struct Rank {
    Rank(int32_t num_blocks, int32_t host_blocks) : pool(num_blocks, host_blocks) {}
    BlockPool pool;
    std::deque<int32_t> waiting;      // queue order; preempted sequences go to the front
    std::vector<int32_t> prefilling;  // part-way through a prefill, add order
    std::vector<int32_t> decoding;    // prefill fully scheduled, still generating
    std::vector<int32_t> members;     // unfinished sequences (the DP assignment's load)
    int32_t num_running = 0;
    int32_t round_hit_tokens = 0;  // prefix hits admitted in the present round
    int32_t round_reloaded_blocks = 0;  // of them, blocks reloaded from the host tier
    // `decoding` holds running sequences only, in decode order for their present output
    // lengths: the next decode round need not sort it. Cleared by whatever may break that
    // (a sequence joins or finishes, outputs grow unevenly), set by the sort.
    bool decode_sorted = false;
  };
  struct Chunk {
    int32_t q, padded, new_blocks;
    bool final;
    int32_t shared_blocks;  // admission: leading prompt blocks found in the prefix index
    int32_t reloaded_blocks;  // admission: the host tier's blocks right after those
    int32_t done;           // prefill tokens before this chunk
  };

  const Rank& rank_at(int64_t rank) const;  // validated
  // The sequence's DP rank by config_.dp_assign; its order and block hashes are set.
  int32_t assign_rank(const Sequence& s, int64_t session_id);
  int32_t least_loaded_rank() const;
  int32_t cache_aware_rank(const Sequence& s) const;
  bool would_prefill(const Rank& rank) const;
  // The prompt round's candidates under `budget`; admit: new sequences from the queue too.
  void prompt_round(Rank& rank, Batch::Rows& rows, int32_t budget, bool admit);
  std::optional<Chunk> next_chunk(const Rank& rank, const Sequence& s, int32_t budget) const;
  int32_t prefill_blocks(const Sequence& s) const;
  struct PrefixHit {
    int32_t shared = 0;    // leading prompt blocks found in the prefix index
    int32_t revived = 0;   // of them, retained ones
    int32_t reloaded = 0;  // the blocks after them on the host tier
  };
  PrefixHit prefix_hit(const Rank& rank, const Sequence& s) const;
  void index_prompt_blocks(Rank& rank, Sequence& s) const;
  void decode_round(Rank& rank, Batch& batch, std::vector<int64_t>& preempted);
  // Rule 9.15: decode rows first, under the token budget, then the prompt round's candidates
  // with the budget left. Returns whether it scheduled a prefill token.
  bool mixed_round(Rank& rank, Batch& batch, std::vector<int64_t>& preempted);
  // The rank's running sequences in decode order, into candidates_ (a completion engine
  // admits its prefilled sequences first).
  void gather_decode_candidates(Rank& rank);
  // The decode round's rows of candidates_, q = 1 + num_mtp positions each, into rows (which
  // must be empty), allocating and preempting; with kBudget each costs q of `budget` and
  // writes its seq_id too. Returns the budget left. One loop for both rounds, out of line
  // and with q a parameter: GCC then adds {q, 1} to a sequence's two in-flight counters with
  // one vector add and store, which it does not when the loop is inlined into a round (the
  // decode round about 6 % slower; tests/bench/README.md).
  template <bool kBudget>
  [[gnu::noinline]] int32_t decode_rows(Rank& rank, Batch::Rows& rows, int32_t q, int32_t budget,
                                        std::vector<int64_t>& preempted);
  // A decode step computes 1 + num_mtp positions, for a sequence that has its KV and still
  // wants a token once its in-flight samples are in.
  static bool wants_token(const Sequence& s) {
    return !s.kv_pending && s.output_len() + s.inflight_samples < s.max_new_tokens;
  }
  void admit_prefilled(Rank& rank);
  void order_for_decode(Rank& rank) const;
  void write_decode_rows(Batch& batch, const Batch::Rows& rows);
  void preempt(Rank& rank, int32_t idx);
  // Every change to a sequence's block list goes through these (blocks_version).
  void allocate_blocks(Rank& rank, Sequence& s, int32_t n) {
    rank.pool.allocate(n, s.blocks);
    s.blocks_version = next_version_++;
  }
  void release_blocks(Rank& rank, Sequence& s) {
    const bool held =
        config_.session_retention && s.session_id >= 0 && ended_sessions_.count(s.session_id) == 0;
    rank.pool.release(s.blocks, held ? s.session_id : -1);
    s.blocks_version = next_version_++;
  }
  void finish(Rank& rank, int32_t idx);
  struct Gains {  // tokens gained by the sampling rows of a batch
    size_t sampled = 0;
    int32_t least = std::numeric_limits<int32_t>::max(), most = 0;
    void add(int32_t gain) {
      ++sampled;
      least = std::min(least, gain);
      most = std::max(most, gain);
    }
  };
  template <bool kDrafts>
  [[gnu::noinline]] size_t postprocess_decodes(const Batch& batch, const int64_t* drafts,
                                               int32_t* output_len, uint32_t* other, Gains& gains);
  int32_t postprocess_row(Rank& rank, int32_t idx, int32_t q, RowKind kind, int32_t gained,
                          int32_t& output_len, PostprocessOutput& out);
  SeqRecord record_of(const Sequence& s) const;
  static size_t flat_rows(const ScheduleOutput& plan);
  // The slot is freed once plan `after_step` is post-processed (retain_finished off).
  void leave(int32_t idx, int64_t after_step);
  void free_left_slots();
  int32_t take_slot();
  void check_postprocess(const ScheduleOutput& plan, const std::vector<int64_t>* accepted) const;
  int64_t check_added(int64_t seq_id, int64_t prompt_len, int64_t max_new_tokens,
                      const std::vector<int64_t>& hash_ids, int64_t hash_block_size,
                      bool kv_transfer) const;
  std::optional<int64_t> place(Sequence& s, int32_t idx, std::optional<uint64_t> too_long);
  std::shared_ptr<ScheduleOutput> take_plan();
  void check_rows(const ScheduleOutput& plan) const;
  void add_row(Batch::Rows& rows, int32_t idx, int32_t q, int32_t padded, int32_t seqlen_k,
               RowKind kind) const {
    const Sequence& s = seqs_[idx];
    rows.add(s.seq_id, idx, q, padded, seqlen_k, kind, static_cast<int32_t>(s.blocks.size()));
  }
  void fill_block_tables(Batch& batch) const;
  // Up to `width` of the sequence's blocks, -1 padded, unless the row's mark says it holds
  // them already (most rows of a decode round: a sequence gains a block every block_size
  // tokens). Rows are short: plain loops beat a memcpy call per row.
  static void write_table_row(int32_t* row, uint64_t& mark, const Sequence& s, int32_t width) {
    if (mark == s.blocks_version) {
      if constexpr (kChecks) check_table_row(row, s, width);
      return;
    }
    const int32_t n = std::min(static_cast<int32_t>(s.blocks.size()), width);
    const int32_t* src = s.blocks.data();
    for (int32_t k = 0; k < n; ++k) row[k] = src[k];
    for (int32_t k = n; k < width; ++k) row[k] = -1;
    mark = s.blocks_version;
  }
  static void check_table_row(const int32_t* row, const Sequence& s, int32_t width);
  std::vector<int64_t> flat_limits(const ScheduleOutput& plan) const;
  int32_t blocks_for(int32_t tokens) const {
    return (tokens + config_.block_size - 1) / config_.block_size;
  }
  // Blocks to add to `have` to cover `tokens`; the common "covered" case avoids a division.
  int32_t new_blocks(int32_t have, int32_t tokens) const {
    return tokens <= have * config_.block_size ? 0 : blocks_for(tokens) - have;
  }

  SchedulerConfig config_;
  int32_t lookahead_;
  uint64_t id_;
  std::vector<Rank> ranks_;
  std::vector<Sequence> seqs_;
  std::unordered_map<int64_t, int32_t> index_;
  // session_affinity: the rank each session's latest sequence went to (never forgotten)
  std::unordered_map<int64_t, int32_t> session_rank_;
  std::unordered_set<int64_t> ended_sessions_;  // session_retention: end_session()'s
  std::vector<int64_t> pending_rejected_;
  int64_t num_unfinished_ = 0;
  int64_t next_step_ = 0;
  int64_t next_postprocess_ = 0;
  uint64_t next_version_ = 1;  // the next Sequence::blocks_version
  std::vector<int32_t> candidates_;  // scratch, reused across rounds
  std::vector<int32_t> victims_;     // scratch
  std::vector<uint32_t> stale_rows_;  // scratch: decode rows whose table row is out of date
  std::vector<uint32_t> other_rows_;  // scratch: postprocess's rows that are not plain decodes
  bool retain_finished_;
  int32_t num_added_ = 0;
  struct Leaving {
    int32_t slot;
    int64_t after_step;
  };
  // In leaving order; freed from the front, so one behind an entry not yet due waits for
  // it (a step at most: after_step is next_step_ or next_step_ - 1 when it leaves).
  std::deque<Leaving> leaving_;
  std::vector<int32_t> free_slots_;  // vacant slots, reused last-freed first
  // Plans to recycle: one is reused when nothing else holds it (no Python Plan, no numpy
  // view of its buffers) and it has been post-processed.
  static constexpr size_t kPlanPool = 4;
  std::vector<std::shared_ptr<ScheduleOutput>> plans_;
  size_t next_evicted_ = 0;
};

}  // namespace steptrace
