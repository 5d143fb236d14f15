// The step log without Python: a few scheduled and post-processed steps in, the steps,
// batches and requests columns (csrc/recorder/columns.hpp; docs/tables.md) and the
// inter-token gaps out.
#include <stdexcept>
#include <utility>
#include <vector>

#include "harness.hpp"
#include "recorder/step_log.hpp"
#include "scheduler.hpp"

using namespace steptrace;

namespace {

SchedulerConfig small() {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 16;
  cfg.num_kv_blocks = 64;
  cfg.block_size = 16;
  return cfg;
}

// One step: scheduled, post-processed and recorded over [t0, t1], every rank at rank_s.
void step(Scheduler& s, StepLog& log, double t0, double t1, double rank_s = 0.0) {
  auto plan = s.schedule();
  const PostprocessOutput post = s.postprocess(*plan, nullptr);
  StepCost cost;
  cost.rank_s = rank_s;
  const std::vector<StepCost> costs(plan->batches.size(), cost);
  log.record(*plan, post, RecordedTimes{t0, t1, StepTimes{}, 0}, costs);
}

}  // namespace

// docs/scheduling.md's baseline: A (6 prompt tokens) and B (3) prefill in step 0 and
// decode their second and last token in step 1.
TEST(two_requests_two_steps_make_two_step_rows_four_batch_rows_two_request_rows) {
  Scheduler s(small());
  StepLog log(0);
  log.enqueue(s.add_sequence(0, 6, 2, 0.0), 0.0);
  log.enqueue(s.add_sequence(1, 3, 2, 0.0), 0.0);
  step(s, log, 0.0, 0.5);
  step(s, log, 0.5, 0.75);

  const StepRows& steps = log.steps();
  EXPECT((steps.step == std::vector<int64_t>{0, 1}));
  EXPECT((steps.prompt_phase == std::vector<uint8_t>{1, 0}));
  EXPECT((steps.num_seqs == std::vector<int32_t>{2, 2}));
  EXPECT((steps.tokens_q == std::vector<int64_t>{9, 2}));
  EXPECT((steps.prefill_tokens_q == std::vector<int64_t>{9, 0}));
  EXPECT((steps.sum_seqlen_k == std::vector<int64_t>{9, 11}));  // decode: 7 + 4
  EXPECT((steps.max_seqlen_k == std::vector<int32_t>{6, 7}));
  EXPECT((steps.finished == std::vector<int32_t>{0, 2}));
  EXPECT((steps.t_start_s == std::vector<double>{0.0, 0.5}));
  EXPECT((steps.t_end_s == std::vector<double>{0.5, 0.75}));

  const BatchRows& batches = log.batches();
  EXPECT((batches.step == std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT((batches.seq_id == std::vector<int64_t>{0, 1, 1, 0}));  // decode: the later add first
  EXPECT((batches.kind == std::vector<int8_t>{kFinal, kFinal, kDecode, kDecode}));
  EXPECT((batches.seqlen_q == std::vector<int32_t>{6, 3, 1, 1}));
  EXPECT((batches.seqlen_k == std::vector<int32_t>{6, 3, 4, 7}));

  // Both left in step 1, in postprocess's order; each row: first token at the end of its
  // prefill step, the last at the end of step 1.
  const RequestRows& requests = log.requests();
  EXPECT(requests.request_id.size() == 2 && log.num_done() == 2 && log.num_live() == 0);
  for (size_t i = 0; i < requests.request_id.size(); ++i) {
    EXPECT(requests.enqueue_s[i] == 0.0 && requests.first_scheduled_s[i] == 0.0);
    EXPECT(requests.first_scheduled_step[i] == 0);
    EXPECT(requests.first_token_s[i] == 0.5 && requests.last_token_s[i] == 0.75);
    EXPECT(requests.output_tokens[i] == 2 && requests.preemptions[i] == 0);
    EXPECT(requests.decode_stall_s[i] == 0.0);
    EXPECT(requests.status[i] == kEndFinished);
  }
  EXPECT((log.itl() == std::vector<std::pair<double, int64_t>>{{0.25, 2}}));
}

// A request still decoding at the end leaves as unfinished with the tokens it has; its gaps
// stay out of the inter-token distribution.
TEST(a_request_live_at_the_end_leaves_unfinished_and_out_of_the_gaps) {
  Scheduler s(small());
  StepLog log(0);
  log.enqueue(s.add_sequence(0, 4, 2, 0.0), 0.0);
  log.enqueue(s.add_sequence(1, 4, 5, 0.0), 0.0);
  step(s, log, 0.0, 1.0);
  step(s, log, 1.0, 1.5);  // 0 finishes; 1 has 2 of its 5 tokens
  step(s, log, 1.5, 1.75);
  EXPECT(log.num_live() == 1);
  log.end();
  const RequestRows& requests = log.requests();
  EXPECT((requests.request_id == std::vector<int64_t>{0, 1}));
  EXPECT((requests.status == std::vector<uint8_t>{kEndFinished, kEndUnfinished}));
  EXPECT((requests.output_tokens == std::vector<int64_t>{2, 3}));
  EXPECT(requests.last_token_s[1] == 1.75);
  EXPECT((log.itl() == std::vector<std::pair<double, int64_t>>{{0.5, 1}}));
}

// The warm-up steps are marked, and a request first scheduled in one is not measured.
TEST(warmup_steps_are_marked_and_their_requests_not_measured) {
  Scheduler s(small());
  StepLog log(1);
  log.enqueue(s.add_sequence(0, 4, 3, 0.0), 0.0);
  step(s, log, 0.0, 1.0);
  log.enqueue(s.add_sequence(1, 4, 2, 1.0), 1.0);
  step(s, log, 1.0, 2.0);
  step(s, log, 2.0, 2.5);
  EXPECT((log.steps().warmup == std::vector<uint8_t>{1, 0, 0}));
  EXPECT((log.itl() == std::vector<std::pair<double, int64_t>>{{0.5, 1}}));  // request 1's
}

TEST(a_plan_of_another_scheduler_is_refused) {
  Scheduler a(small()), b(small());
  StepLog log(0);
  log.enqueue(a.add_sequence(0, 4, 2, 0.0), 0.0);
  EXPECT_THROWS(log.enqueue(b.add_sequence(1, 4, 2, 0.0), 0.0), std::invalid_argument);
  auto plan = b.schedule();
  const PostprocessOutput post = b.postprocess(*plan, nullptr);
  EXPECT_THROWS(log.record(*plan, post, RecordedTimes{0, 1, StepTimes{}, 0},
                           std::vector<StepCost>(plan->batches.size())),
                std::invalid_argument);
}
