// The columns the step log writes, declared once, in the tables' order (the Python schema,
// harness/schema/tables.py, declares the same; tests/test_tables_schema.py holds the two
// in step). Each table is an X-macro: X(type, name, ...how its value is written). The rows'
// structs, their each_column and the log's writes (step_log.cpp) all expand it.
//
// steps: one row per (step, DP rank), but for idle ranks whose rows say nothing the step's
// other rows don't (step_log.cpp, written_rows). A STEP column's value is the step's own, the
// same on every row of the step (written once for all of them); a RANK column's is the
// rank's. The values name what step_log.cpp has in hand: the plan, its postprocess result,
// the step's times, its ranks' aggregates `all`; the rank's batch `b`, its cost, and its
// rows' sums.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#define STEPTRACE_STEP_COLUMNS(X)                                       \
  X(int64_t, step, STEP, plan.step)                                     \
  X(int32_t, dp_rank, RANK, b.rank)                                     \
  X(uint8_t, prompt_phase, STEP, plan.phase == Phase::kPrompt)          \
  X(uint8_t, empty, RANK, b.empty())                                    \
  X(uint8_t, warmup, STEP, plan.step < warmup_steps_)                   \
  X(int32_t, num_seqs, RANK, b.rows())                                  \
  X(int64_t, tokens_q, RANK, sums.tokens_q)                             \
  X(int64_t, padded_tokens_q, RANK, sums.padded_q)                      \
  X(int64_t, prefill_tokens_q, RANK, sums.prefill_q)                    \
  X(int64_t, sum_seqlen_k, RANK, sums.sum_seqlen_k)                     \
  X(int32_t, max_seqlen_k, RANK, sums.max_seqlen_k)                     \
  X(int32_t, preempted, STEP, plan.preempted.size())                    \
  X(int32_t, rejected, STEP, plan.rejected.size())                      \
  X(int32_t, finished, STEP, post.finished.size())                      \
  X(int64_t, discarded_tokens, STEP, post.discarded_tokens)             \
  X(int32_t, kv_blocks_free, RANK, b.kv_blocks_free)                    \
  X(int32_t, waiting, RANK, b.num_waiting)                              \
  X(int32_t, running, RANK, b.num_running)                              \
  X(int32_t, prefix_hit_tokens, RANK, b.num_hit_tokens)                 \
  X(int32_t, kv_blocks_reloaded, RANK, b.num_reloaded_blocks)           \
  X(int32_t, kv_blocks_evicted, RANK, b.num_evicted_blocks)             \
  X(int32_t, kv_blocks_retained, RANK, b.num_retained_blocks)           \
  X(double, t_start_s, STEP, times.t_start_s)                           \
  X(double, t_end_s, STEP, times.t_end_s)                               \
  X(int64_t, sched_cpp_ns, STEP, plan.sched_ns)                         \
  X(int64_t, sched_call_ns, STEP, times.engine.sched_call_ns)           \
  X(int64_t, forward_ns, STEP, times.engine.forward_ns)                 \
  X(int64_t, sample_ns, STEP, times.engine.sample_ns)                   \
  X(int64_t, postprocess_ns, STEP, times.engine.postprocess_ns)         \
  X(int64_t, step_ns, STEP, times.engine.step_ns)                       \
  X(int64_t, flush_ns, STEP, times.flush_ns)                            \
  X(double, model_flops, RANK, cost.model_flops)                        \
  X(double, executed_flops, RANK, cost.executed_flops)                  \
  X(double, bytes, RANK, cost.bytes)                                    \
  X(double, attention_s, RANK, cost.attention_s)                        \
  X(double, dense_s, RANK, cost.dense_s)                                \
  X(double, experts_s, RANK, cost.experts_s)                            \
  X(double, dispatch_s, RANK, cost.dispatch_s)                          \
  X(double, combine_s, RANK, cost.combine_s)                            \
  X(double, allreduce_s, RANK, cost.allreduce_s)                        \
  X(int8_t, extrapolated, RANK, static_cast<int8_t>(cost.extrapolated)) \
  X(double, rank_s, RANK, cost.rank_s)                                  \
  X(double, slowest_rank_s, STEP, all.slowest_rank_s)                   \
  X(double, mean_rank_s, STEP, all.mean_rank_s)                         \
  X(double, dp_imbalance, STEP, all.dp_imbalance)                       \
  X(int32_t, idle_ranks, STEP, all.idle_ranks)                          \
  X(int64_t, idle_kv_blocks_free, STEP, all.idle_kv_blocks_free)

// batches: one row per scheduled sequence; a FILL column repeats the batch's value on each
// of its rows, a COPY column copies one of the batch's arrays.
#define STEPTRACE_BATCH_COLUMNS(X)       \
  X(int64_t, step, FILL, step)           \
  X(int32_t, dp_rank, FILL, b.rank)      \
  X(int64_t, seq_id, COPY, b.seq_ids)    \
  X(int8_t, kind, COPY, b.kind)          \
  X(int32_t, seqlen_q, COPY, b.seqlen_q) \
  X(int32_t, seqlen_k, COPY, b.seqlen_k)

// requests: one row per request that left, or was still live at the end: its live record
// `r`, the SeqRecord it `left` as, how it ended (`end`, `unfinished`), its decode stall
// (`stall_s`, counted to the end); what it brought in (`in`, an Intake: a P/D request's
// prefill side) and its P/D columns (`pd`); `decodes`: this log's instance decodes (not a
// P/D prefill instance's, which hands its requests on).
#define STEPTRACE_REQUEST_COLUMNS(X)                                                            \
  X(int64_t, request_id, seq_id)                                                                \
  X(double, enqueue_s, in.enqueue_s)                                                            \
  X(double, first_scheduled_s, in.first_scheduled_s)                                            \
  X(double, first_token_s, r.first_token_s)                                                     \
  X(double, last_token_s, r.last_token_s)                                                       \
  X(double, decode_stall_s, stall_s)                                                            \
  X(int64_t, first_scheduled_step, in.first_scheduled_step) /* -1: never scheduled */           \
  X(int64_t, output_tokens, unfinished ? r.tokens : left.output_len)                            \
  X(int32_t, dp_rank, in.dp_rank)                                                               \
  X(int32_t, preemptions, in.preemptions + (unfinished ? r.preemptions : left.num_preemptions)) \
  X(int64_t, recomputed_tokens, in.recomputed_tokens + left.recomputed_tokens)                  \
  X(int64_t, prefix_hit_tokens, in.prefix_hit_tokens)                                           \
  X(uint8_t, status, end) /* RequestEnd */                                                      \
  X(std::string, reason, left.reason)                                                           \
  X(int32_t, prefill_instance, pd.prefill_instance)                                             \
  X(int32_t, decode_instance, pd.decode_instance)                                               \
  X(int32_t, decode_dp_rank, decodes ? left.dp_rank : -1)                                       \
  X(double, kv_bytes, pd.kv_bytes)                                                              \
  X(double, handoff_s, pd.handoff_s)                                                            \
  X(double, transfer_start_s, pd.transfer_start_s)                                              \
  X(double, transfer_end_s, pd.transfer_end_s)                                                  \
  X(double, decode_wait_s, pd.decode_wait_s)

// A table's members and each_column(f): f(name, column) for every column, in order.
#define STEPTRACE_COLUMN_MEMBER(type, name, ...) std::vector<type> name;
#define STEPTRACE_COLUMN_VISIT(type, name, ...) f(#name, name);

namespace steptrace {

struct StepRows {
  STEPTRACE_STEP_COLUMNS(STEPTRACE_COLUMN_MEMBER)
  template <typename F>
  void each_column(F&& f) {
    STEPTRACE_STEP_COLUMNS(STEPTRACE_COLUMN_VISIT)
  }
};

struct BatchRows {
  STEPTRACE_BATCH_COLUMNS(STEPTRACE_COLUMN_MEMBER)
  template <typename F>
  void each_column(F&& f) {
    STEPTRACE_BATCH_COLUMNS(STEPTRACE_COLUMN_VISIT)
  }
};

struct RequestRows {
  STEPTRACE_REQUEST_COLUMNS(STEPTRACE_COLUMN_MEMBER)
  template <typename F>
  void each_column(F&& f) {
    STEPTRACE_REQUEST_COLUMNS(STEPTRACE_COLUMN_VISIT)
  }
};

}  // namespace steptrace
