// The scheduler without Python: docs/scheduling.md's baseline worked example, slots of
// sequences that left reused (retain_finished off), and plans recycled.
#include <algorithm>
#include <memory>
#include <vector>

#include "harness.hpp"
#include "scheduler.hpp"

using namespace steptrace;

namespace {

SchedulerConfig baseline() {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 16;
  cfg.num_kv_blocks = 1024;
  cfg.block_size = 16;
  return cfg;
}

// Runs rounds until nothing is left, checking the invariants after each call.
void drain(Scheduler& s) {
  for (int i = 0; i < 10000 && !s.is_finished(); ++i) {
    auto plan = s.schedule();
    s.check_invariants();
    s.postprocess(*plan, nullptr);
    s.check_invariants();
  }
}

}  // namespace

TEST(baseline_two_prompts_then_decode) {
  Scheduler s(baseline());
  s.add_sequence(0, 6, 10, 0.0);  // A
  s.add_sequence(1, 3, 10, 0.0);  // B
  auto plan = s.schedule();
  const Batch& b0 = plan->batches[0];
  EXPECT(plan->phase == Phase::kPrompt);
  EXPECT((b0.seq_ids == std::vector<int64_t>{0, 1}));
  EXPECT((b0.seqlen_q == std::vector<int32_t>{6, 3}) &&
         (b0.seqlen_k == std::vector<int32_t>{6, 3}));
  s.postprocess(*plan, nullptr);
  EXPECT(s.seq(0).num_tokens == 7 && s.seq(0).num_cached == 6);
  EXPECT(s.seq(1).num_tokens == 4 && s.seq(1).num_cached == 3);

  plan = s.schedule();
  const Batch& b1 = plan->batches[0];
  EXPECT(plan->phase == Phase::kDecode);
  EXPECT((b1.seq_ids == std::vector<int64_t>{1, 0}));  // equal outputs: the later add first
  EXPECT((b1.seqlen_q == std::vector<int32_t>{1, 1}) &&
         (b1.seqlen_k == std::vector<int32_t>{4, 7}));
  s.postprocess(*plan, nullptr);
  EXPECT(s.seq(0).num_tokens == 8 && s.seq(0).num_cached == 7);
  EXPECT(s.seq(1).num_tokens == 5 && s.seq(1).num_cached == 4);
}

// docs/scheduling.md, "KV in transfer": the worked example.
TEST(kv_in_transfer_reserves_then_decodes) {
  SchedulerConfig cfg = baseline();
  cfg.engine_type = EngineType::kCompletion;
  cfg.block_size = 4;
  cfg.num_kv_blocks = 5;
  Scheduler s(cfg);
  s.add_sequence(0, 6, 3, 0.0);                    // A
  s.add_sequence(1, 8, 2, 0.0, {}, 0, true);       // R
  s.add_sequence(2, 3, 2, 0.0, {}, 0, true);       // C
  auto plan = s.schedule();  // A (2 blocks), R (3) admitted; C waits
  EXPECT((plan->batches[0].seq_ids == std::vector<int64_t>{0}));
  EXPECT(s.seq(1).status == SeqStatus::kRunning && s.seq(1).kv_pending &&
         s.seq(1).blocks.size() == 3);
  EXPECT(s.seq(2).status == SeqStatus::kWaiting && plan->batches[0].num_running == 2);
  s.postprocess(*plan, nullptr);
  s.kv_arrived(1);
  EXPECT_THROWS(s.kv_arrived(1), std::invalid_argument);  // it awaits no transfer now
  plan = s.schedule();
  EXPECT((plan->batches[0].seq_ids == std::vector<int64_t>{1, 0}) &&
         (plan->batches[0].seqlen_k == std::vector<int32_t>{9, 8}));
  s.postprocess(*plan, nullptr);
  plan = s.schedule();  // C admitted: its reservation, nothing to decode
  EXPECT(plan->batches[0].rows() == 0 && s.seq(2).status == SeqStatus::kRunning);
  s.postprocess(*plan, nullptr);
  s.kv_arrived(2);
  drain(s);
  EXPECT(s.seq(2).output_len() == 2 && s.num_free_blocks(0) == 5);
  EXPECT_THROWS(s.kv_arrived(7), std::invalid_argument);
  Scheduler normal(baseline());
  EXPECT_THROWS(normal.add_sequence(0, 6, 3, 0.0, {}, 0, true), std::invalid_argument);
}

// docs/scheduling.md, "Mixed batches" (9.15): the worked example, and block-table rows
// that a recycled plan holds for decode rows and chunks alike.
TEST(mixed_batches_decode_rows_then_chunks_under_the_budget) {
  SchedulerConfig cfg = baseline();
  cfg.mixed_batches = true;
  cfg.max_num_batched_tokens = 4;
  Scheduler s(cfg, /*retain_finished=*/false);
  s.add_sequence(0, 6, 3, 0.0);  // A
  s.add_sequence(1, 5, 3, 0.0);  // B
  struct Want {
    Phase phase;
    std::vector<int64_t> ids;
    std::vector<int8_t> kind;
    std::vector<int32_t> q, k;
  };
  const std::vector<Want> steps = {
      {Phase::kPrompt, {0}, {kChunk}, {4}, {4}},
      {Phase::kPrompt, {0, 1}, {kFinal, kChunk}, {2, 2}, {6, 2}},
      {Phase::kPrompt, {0, 1}, {kDecode, kFinal}, {1, 3}, {7, 5}},
      {Phase::kPrompt, {1, 0, 2}, {kDecode, kDecode, kChunk}, {1, 1, 2}, {6, 8, 2}},
      {Phase::kPrompt, {1, 2}, {kDecode, kFinal}, {1, 1}, {7, 3}},
      {Phase::kDecode, {2}, {kDecode}, {1}, {4}},
  };
  for (size_t step = 0; step < steps.size(); ++step) {
    if (step == 2) s.add_sequence(2, 3, 2, 0.0);  // C
    auto plan = s.schedule();
    s.check_invariants();
    const Batch& b = plan->batches[0];
    const Want& w = steps[step];
    EXPECT(plan->phase == w.phase && b.seq_ids == w.ids && b.kind == w.kind && b.seqlen_q == w.q &&
           b.seqlen_k == w.k);
    for (size_t j = 0; j < b.rows(); ++j) {
      const Sequence& seq = s.at(b.seq_index[j]);
      for (int32_t c = 0; c < b.table_width; ++c)
        EXPECT(b.block_tables[j * b.table_width + c] ==
               (c < static_cast<int32_t>(seq.blocks.size()) ? seq.blocks[c] : -1));
    }
    s.postprocess(*plan, nullptr);
    s.check_invariants();
  }
  EXPECT(s.is_finished());
}

TEST(retained_sequences_stay_readable_after_they_finish) {
  Scheduler s(baseline());
  s.add_sequence(0, 6, 2, 0.0);
  drain(s);
  EXPECT(s.seq(0).status == SeqStatus::kFinished && s.seq(0).output_len() == 2);
  EXPECT(s.num_sequences() == 1 && s.num_live() == 1);
}

TEST(a_left_sequence_is_forgotten_and_its_slot_reused) {
  Scheduler s(baseline(), /*retain_finished=*/false);
  s.add_sequence(0, 6, 2, 0.0);
  s.add_sequence(1, 5000, 2, 0.0);  // rejected: needs more blocks than a rank has
  drain(s);
  EXPECT(s.num_live() == 0 && s.num_sequences() == 2);
  EXPECT_THROWS(s.seq(0), SequenceLeft);
  EXPECT_THROWS(s.seq(1), SequenceLeft);
  EXPECT(s.num_free_blocks(0) == 1024);
  s.add_sequence(2, 6, 2, 0.0);
  s.add_sequence(0, 3, 1, 0.0);  // a left id is a new request
  EXPECT(s.num_sequences() == 2 && s.num_live() == 2);
  drain(s);
  EXPECT(s.num_live() == 0 && s.num_sequences() == 2);
}

TEST(a_slot_stays_until_every_plan_that_names_it_is_postprocessed) {
  SchedulerConfig cfg = baseline();
  cfg.overlap = true;
  Scheduler s(cfg, /*retain_finished=*/false);
  s.add_sequence(0, 6, 1, 0.0);
  auto p0 = s.schedule();  // the final chunk samples the only token
  auto p1 = s.schedule();  // nothing more to do for it: an empty plan
  s.postprocess(*p0, nullptr);
  EXPECT(s.num_live() == 0 || s.num_outstanding_plans() == 1);
  s.postprocess(*p1, nullptr);
  EXPECT(s.num_live() == 0);
  EXPECT_THROWS(s.seq(0), SequenceLeft);
}

TEST(a_live_sequence_never_shares_its_slot_over_a_long_run) {
  SchedulerConfig cfg = baseline();
  cfg.num_kv_blocks = 40;
  cfg.max_num_seqs = 4;
  cfg.max_num_batched_tokens = 256;
  cfg.overlap = true;
  Scheduler s(cfg, /*retain_finished=*/false);
  int64_t next_id = 0;
  size_t most_live = 0;
  std::shared_ptr<ScheduleOutput> inflight;
  for (int round = 0; round < 3000; ++round) {
    if (round % 3 == 0) s.add_sequence(next_id++, 1 + (round * 7) % 90, 1 + round % 13, 0.0);
    auto plan = s.schedule();
    s.check_invariants();
    if (inflight) s.postprocess(*inflight, nullptr);
    s.check_invariants();
    inflight = plan;
    most_live = std::max(most_live, s.num_live());
  }
  // Slots: the most ever live, plus those that left within the last two plans.
  EXPECT(s.num_sequences() <= most_live + 2 * cfg.max_num_seqs);
  EXPECT(s.num_sequences() < 50);  // 1,000 requests went through
}

TEST(a_plan_nothing_holds_is_reused_and_a_held_one_is_not) {
  Scheduler s(baseline());
  s.add_sequence(0, 6, 100, 0.0);
  auto first = s.schedule();
  const ScheduleOutput* address = first.get();
  s.postprocess(*first, nullptr);
  auto held = s.schedule();  // `first` still held
  EXPECT(held.get() != address);
  s.postprocess(*held, nullptr);
  first.reset();
  auto reused = s.schedule();
  EXPECT(reused.get() == address && reused->step == 2);
  EXPECT(reused->batches[0].rows() == 1 && reused->batches[0].seqlen_k[0] == 8);
  EXPECT(reused->preempted.empty() && reused->rejected.empty());
}

// Conversations through a pool too small to keep them all: every turn repeats its
// session's earlier prompt, so blocks are shared, retained, revived and evicted, and the
// invariants (the pool's retained list and prefix index included) hold after every call.
TEST(conversations_through_a_small_pool_share_retain_and_evict) {
  SchedulerConfig cfg = baseline();
  cfg.block_size = 4;
  cfg.num_kv_blocks = 24;
  cfg.max_num_batched_tokens = 32;
  Scheduler s(cfg, false);
  int64_t id = 0, hits = 0, evicted = 0;
  for (int turn = 1; turn <= 4; ++turn) {
    for (int64_t session = 0; session < 5; ++session) {
      std::vector<int64_t> ids;  // 8-token hash blocks: two engine blocks each
      for (int i = 0; i < turn; ++i) ids.push_back(session * 100 + i);
      s.add_sequence(id++, 8 * turn, 3, 0.0, ids, 8);
    }
    for (int i = 0; i < 10000 && !s.is_finished(); ++i) {
      auto plan = s.schedule();
      s.check_invariants();
      hits += plan->batches[0].num_hit_tokens;
      evicted += plan->batches[0].num_evicted_blocks;
      s.postprocess(*plan, nullptr);
      s.check_invariants();
    }
  }
  EXPECT(s.is_finished() && hits > 0 && evicted > 0 && s.num_free_blocks(0) == 24);
}
