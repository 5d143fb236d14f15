// The recorder's core: each post-processed plan is copied into chunked columns (a row per
// step and rank, idle ranks' rows left out where the step's other rows say what they
// would; a row per scheduled sequence) and folded into per-request token times, in one
// call. A request's row joins the request columns when it leaves the scheduler (a P/D
// request's one row, when it leaves its decode instance: Handoffs::kKept). The
// harness takes the columns chunk by chunk and streams them to disk, so memory stays
// bounded by the chunk, the live requests, and the distinct inter-token gaps.
//
// Everything comes from what the caller hands in (the add record, the plan and its
// postprocess output): the log reads no scheduler, and keys requests by seq_id.
//
// Inter-token gaps (ITL) go into a histogram of exact values as they happen: the rows of
// one step mostly share their previous token's step, so equal gaps come in runs and cost
// one map update per run. A measured request also holds its own gaps until it leaves;
// those of requests that never completed stay out of itl().
//
// Decode stall (docs/metrics.md): the recorded steps' spans are summed as they come
// (busy_s_); a decoding request keeps the sum at which its stall began (stall_mark) and adds
// the difference whenever a step advances it or preempts it, or it leaves. The steps
// it sat out cost nothing per step: O(rows + preempted + left) a step, never O(live).
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "columns.hpp"
#include "cost_model.hpp"
#include "schedule_output.hpp"

namespace steptrace {

struct RankSums {  // a rank's rows summed: the steps table's RANK columns of its batch
  int64_t tokens_q = 0, padded_q = 0, prefill_q = 0, sum_seqlen_k = 0;
  int32_t max_seqlen_k = 0;
};

// A step's values over all its DP ranks, written rows or not: the steps table's aggregates.
struct StepRanks {
  double slowest_rank_s = 0, mean_rank_s = 0;  // of every rank's rank_s
  // The slowest rank's own time over the mean rank's: what waiting for the slowest costs DP
  // attention; NaN where the step's ranks have no modeled time.
  double dp_imbalance = std::numeric_limits<double>::quiet_NaN();
  int32_t idle_ranks = 0;           // ranks whose rows are left out
  int64_t idle_kv_blocks_free = 0;  // their free KV blocks, summed
};

// What the engine measured around one step, in ns of perf_counter_ns: engine._core.StepTimes,
// built once per step by LLMEngine and carried in its StepRecord.
struct StepTimes {
  int64_t start_ns = 0;        // when the step's schedule() was called
  int64_t sched_call_ns = 0;   // the call as Python sees it, GIL reacquire included
  int64_t forward_ns = 0;      // measured, or modeled (the device model's)
  int64_t sample_ns = 0;
  int64_t postprocess_ns = 0;
  int64_t step_ns = 0;  // schedule() start to postprocess() end
};

struct RecordedTimes {  // a step's times as the log writes them
  double t_start_s, t_end_s;  // on the run's clock
  StepTimes engine;
  int64_t flush_ns;  // the recorder's own: handing full chunks on, after this step
};

// How a request's row ends (the requests table's `status`: harness/schema/tables.py names
// the codes).
enum RequestEnd : uint8_t {
  kEndFinished = 0,
  kEndRejected = 1,
  kEndUnfinished = 2,
  kEndHandedOff = 3,  // a prompt engine's request, done with its first token
};

// How a log's engine hands its requests on when their prefill is done (a prompt engine's).
enum class Handoffs : uint8_t {
  kNone,  // it does not: a request leaves finished
  kRow,   // each leaves as a row ending kEndHandedOff
  // A P/D prefill instance's, replayed in one process with the decode instances (the
  // modeled loops): each request waits in the log (handed()) until a decode instance's log
  // takes it in (enqueue(added, t, from)) and writes its one row, or the run ends (end():
  // a row unfinished between the pools).
  kKept,
};

// A request's P/D columns as the replay fills them in; their missing values (the
// requests table's, harness/schema/tables.py) until then.
struct PdColumns {
  static constexpr double kNone = std::numeric_limits<double>::quiet_NaN();
  int32_t prefill_instance = -1;
  int32_t decode_instance = -1;
  double kv_bytes = kNone;
  double handoff_s = kNone;
  double transfer_start_s = kNone;
  double transfer_end_s = kNone;
  double decode_wait_s = kNone;
};

// What a request's row takes from the instance that took it in: a P/D request's prefill
// instance (docs/disaggregation.md, "What is recorded"), else the one writing the row.
// Its preemptions and recomputed tokens are those before this instance took it in, added
// to this one's.
struct Intake {
  double enqueue_s, first_scheduled_s;
  int64_t first_scheduled_step;
  int32_t dp_rank, prefix_hit_tokens;
  int32_t preemptions = 0;
  int64_t recomputed_tokens = 0;
};

struct Handed {  // a P/D request a prefill instance handed off
  Intake prefill;
  PdColumns pd;
};

struct LiveRequest {  // seconds on the run's clock; NaN until it happens
  static constexpr double kNever = std::numeric_limits<double>::quiet_NaN();
  double enqueue_s = kNever;
  double first_scheduled_s = kNever;
  double first_token_s = kNever;
  double last_token_s = kNever;
  int64_t first_scheduled_step = -1;
  int32_t tokens = 0;       // output tokens stamped so far
  int32_t preemptions = 0;  // seen in plans, for a request still live at the end
  // Decoding (from the end of the first step whose rows stamped a token for it until it
  // leaves, but for the steps from one that preempts it to its next token): StepLog::busy_s_
  // when a step last advanced it; NaN while not decoding.
  double stall_mark = kNever;
  double decode_stall_s = 0.0;  // the spans of the steps it sat out while decoding, so far
  SeqRecord added;          // as add_sequence returned it
  std::vector<double> gaps;  // a measured request's gaps, until it leaves
  std::unique_ptr<Handed> handed;  // taken in from a P/D prefill instance's log
};

class StepLog {
 public:
  // `instance`: the instance's index in its pool (a co-located one's rows name it as both
  // pools' instance; a kKept log's as the prefill instance, with no decode instance).
  explicit StepLog(int64_t warmup_steps, Handoffs handoff = Handoffs::kNone, int32_t instance = 0);

  // A request entered the engine at t, as add_sequence returned it. Tokens it arrived with
  // (a completion engine's first) are stamped at t; one done on arrival leaves at once.
  // A record of another scheduler than the earlier ones is std::invalid_argument.
  void enqueue(const SeqRecord& added, double t);
  // A request `from` (a kKept log) handed off entered this decode instance at t: enqueued
  // as above, its row is the one row of the request, joined with its prefill side.
  void enqueue(const SeqRecord& added, double t, StepLog& from);
  // The P/D columns of a request this kKept log handed off that no decode instance's log
  // took in yet, for the replay to fill in; std::out_of_range if there is none.
  PdColumns& handed(int64_t seq_id);
  // A plan after its postprocess(), with one StepCost per batch. Tokens are stamped at
  // times.t_end_s; a measured request's gaps join the inter-token distribution; the
  // requests in post.left leave. A pair that does not belong together, or a plan of
  // another scheduler than the earlier requests and plans, is std::invalid_argument.
  void record(const ScheduleOutput& plan, const PostprocessOutput& post, const RecordedTimes& times,
              const std::vector<StepCost>& costs);
  // The requests still live leave as rows: rejected as added, else unfinished. Their gaps
  // leave the inter-token distribution. Then those handed off that no decode instance took
  // in (kKept), by seq_id: unfinished, awaiting decode room or in KV transfer.
  void end();

  int64_t num_done() const { return num_done_; }  // finished, handed off or rejected
  size_t num_live() const { return live_.size(); }
  Handoffs handoffs() const { return handoff_; }
  StepRows& steps() { return steps_; }  // the rows since the caller last emptied them
  BatchRows& batches() { return batches_; }
  RequestRows& requests() { return requests_; }
  // Inter-token gaps of measured, completed requests: (value, count), values ascending.
  std::vector<std::pair<double, int64_t>> itl() const;

 private:
  StepRanks written_rows(const ScheduleOutput& plan, const std::vector<StepCost>& costs);
  void record_step(const ScheduleOutput& plan, const PostprocessOutput& post,
                   const RecordedTimes& times, const StepRanks& all, size_t rows);
  size_t record_rank(const ScheduleOutput& plan, const PostprocessOutput& post,
                     const RecordedTimes& times, const Batch& b, const StepCost& cost, size_t row,
                     bool written);
  void record_batch(int64_t step, const Batch& b);
  void check(const ScheduleOutput& plan, const PostprocessOutput& post,
             const std::vector<StepCost>& costs);
  void take_in(const SeqRecord& added, double t, std::unique_ptr<Handed> handed);
  void stamp(LiveRequest& r, int32_t output_len, double t);
  void add_gap(double gap);
  void end_run();
  void leave(int64_t seq_id, const LiveRequest& r, const SeqRecord& left, RequestEnd end);
  void write(int64_t seq_id, const LiveRequest& r, const SeqRecord& left, RequestEnd end,
             const Intake& in, const PdColumns& pd);

  int64_t warmup_steps_;
  Handoffs handoff_;
  PdColumns own_;  // the P/D columns of the requests no prefill instance handed to it
  std::unordered_map<int64_t, Handed> handed_;  // kKept: handed off, not yet taken in
  uint64_t owner_ = 0;  // the scheduler of the requests and plans recorded so far
  StepRows steps_;
  std::vector<uint8_t> written_;  // scratch: whether each rank of the step has a row
  BatchRows batches_;
  RequestRows requests_;
  std::unordered_map<int64_t, LiveRequest> live_;
  std::unordered_map<double, int64_t> itl_;
  double run_gap_ = 0.0;  // the current run of equal gaps
  int64_t run_count_ = 0;
  int64_t zero_gaps_ = 0;  // accepted drafts, counted apart so they don't break runs
  int64_t num_done_ = 0;
  double busy_s_ = 0.0;  // the spans (t_end_s - t_start_s) of the steps recorded so far
};

}  // namespace steptrace
